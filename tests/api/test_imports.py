"""``import attnscope`` stays light, and the Python API runs on the engine alone: loading and
translating in a fresh interpreter import neither FastAPI, Starlette nor uvicorn."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from attnscope.config import REPO_ROOT

WEB = ("fastapi", "starlette", "uvicorn")


def run(code: str) -> dict[str, list[str]]:
    """``code`` in a fresh interpreter from the checkout; the web and heavy modules it imported."""
    probe = f"""
import json, sys
{code}
loaded = sorted({{name.split(".")[0] for name in sys.modules}})
print(json.dumps({{"loaded": loaded}}))
"""
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=True)
    result: dict[str, list[str]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_import_attnscope_is_light() -> None:
    loaded = run("import attnscope")["loaded"]
    for heavy in ("torch", "numpy", "pydantic", *WEB):
        assert heavy not in loaded


def test_load_translate_and_attribute_without_the_web(tiny_models_dir: Path, tmp_path: Path) -> None:
    folder = tiny_models_dir / "en-de-transformer"
    code = f"""
import attnscope, numpy, torch
torch.set_num_threads(1)  # tiny models on a busy machine: a second thread only spins
from attnscope.vision.testing import build_tiny_vision_models
build_tiny_vision_models({str(tmp_path)!r})
ram = attnscope.load({str(tmp_path / "vision-ram-cluttered")!r}, device="cpu")
assert ram.classify(numpy.zeros((60, 60))).class_probs.shape[1] == 10
model = attnscope.load({str(folder)!r}, device="cpu")
result = model.translate("A dog runs.", beam_size=2, max_length=6)
assert result.attention["cross"].ndim == 4
attributed = model.attribute("A dog runs.", target="Ein Hund.", steps=2)
assert attributed.integrated_gradients.shape == (len(attributed.target_tokens), len(attributed.source_tokens))
"""
    loaded = run(code)["loaded"]
    assert "torch" in loaded  # it did translate
    assert not [name for name in WEB if name in loaded]
