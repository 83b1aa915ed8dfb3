"""scripts/average_models.py: a model soup is the parameter-wise mean of its inputs (saved in
fp16), loads and translates like any model folder, names its inputs in the card, and refuses
inputs of different shapes or tokenizers with an error instead of a stack trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from attnscope.repository import TOKENIZER_FILE, load_model_folder
from attnscope.testing import REPO_ROOT, build_tiny_models
from attnscope.translator import Translator

SCRIPT = REPO_ROOT / "scripts" / "average_models.py"


def run(*args: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300)


def transformer(folders: list[Path]) -> Path:
    return next(p for p in folders if p.name.endswith("transformer"))


def test_the_average_is_the_mean_of_the_inputs_and_translates(tmp_path: Path) -> None:
    a = transformer(build_tiny_models(tmp_path / "a", seed=0))
    b = transformer(build_tiny_models(tmp_path / "b", seed=1))
    assert (a / TOKENIZER_FILE).read_bytes() == (b / TOKENIZER_FILE).read_bytes()
    done = run(tmp_path / "soup", a, b)
    assert done.returncode == 0, done.stderr
    soup = load_model_folder(tmp_path / "soup")
    wa, wb = load_model_folder(a).model.state_dict(), load_model_folder(b).model.state_dict()
    differing = 0
    for name, tensor in soup.model.state_dict().items():
        expected = ((wa[name] + wb[name]) / 2).half().float()  # saved in fp16, like the inputs
        torch.testing.assert_close(tensor, expected, rtol=0, atol=0)
        differing += int(not torch.equal(wa[name], wb[name]))
    assert differing > 0  # the two inputs really differ, so the mean is not one of them
    card = json.loads((tmp_path / "soup" / "card.json").read_text())
    assert card["averaged_from"] == [str(a), str(b)]
    (out,) = Translator(soup).translate(["a dog runs ."], beam_size=2, need_weights=True, max_length=8)
    cross = out.hypothesis.cross
    assert out.target_ids and cross is not None and cross.shape[-2] == len(out.hypothesis.tokens)


def test_mismatched_or_missing_inputs_are_refused_with_a_message(tmp_path: Path) -> None:
    folders = build_tiny_models(tmp_path / "m")
    rnn = next(p for p in folders if not p.name.endswith("transformer"))
    done = run(tmp_path / "soup", transformer(folders), rnn)
    assert done.returncode == 2 and "different model config" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "soup").exists()
    done = run(tmp_path / "soup", transformer(folders), tmp_path / "nowhere")
    assert done.returncode == 2 and "nowhere" in done.stderr and "Traceback" not in done.stderr
    done = run(transformer(folders), transformer(folders), rnn)
    assert done.returncode == 2 and "new folder" in done.stderr
