"""Issue 45.4: every folder attnscope writes is written whole or not at all (attnscope.staging).

Interrupted writes are simulated by raising inside the write, and by a real SIGKILL of a process
half-way through writing a model's weights; in each case nothing loads from the target (or the
previous folder loads unchanged), and a folder without its marker is refused, listed unavailable
by the server with ``complete.json`` named."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attnscope import repository
from attnscope.analysis.summary import SUMMARY_FILE
from attnscope.repository import (
    WEIGHTS_FILE,
    ModelFolderError,
    discover,
    load_model_folder,
    save_model_folder,
)
from attnscope.seal import seal
from attnscope.staging import COMPLETE_FILE
from attnscope.testing import TINY_KINDS, build_tiny_models

RNN = [k for k in TINY_KINDS if k[0] == "rnn-additive"]


class Interrupted(Exception):
    pass


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_model_folder(folder).model.state_dict()


def _half_then_raise(state: dict[str, torch.Tensor], path: str, **_: object) -> None:
    Path(path).write_bytes(b"\0" * 1000)  # a part of the weights is on disk
    raise Interrupted


def test_a_save_interrupted_mid_weights_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (source,) = build_tiny_models(tmp_path / "built", kinds=RNN)
    loaded = load_model_folder(source)
    monkeypatch.setattr(repository, "save_file", _half_then_raise)
    target = tmp_path / "models" / "new-model"
    with pytest.raises(Interrupted):
        save_model_folder(target, loaded.model, loaded.tokenizer, source_lang="en", target_lang="de", card={})
    assert not target.exists()
    assert list((tmp_path / "models").iterdir()) == []  # the staging folder is gone too
    assert discover(tmp_path / "models") == []


def test_a_replacement_interrupted_keeps_the_old_folder_whole(tmp_path: Path) -> None:
    (folder,) = build_tiny_models(tmp_path, kinds=RNN, seed=0)
    before = _weights(folder)
    card_before = (folder / "card.json").read_text()
    (other,) = build_tiny_models(tmp_path / "other", kinds=RNN, seed=1)
    loaded = load_model_folder(other)

    def failing_check(staged: Path) -> None:  # the import's check of its written copy fails
        assert (staged / WEIGHTS_FILE).is_file() and not (staged / COMPLETE_FILE).exists()
        raise Interrupted

    with pytest.raises(Interrupted):
        save_model_folder(folder, loaded.model, loaded.tokenizer, source_lang="en", target_lang="de",
                          card={"new": True}, check=failing_check)  # fmt: skip
    after = _weights(folder)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert (folder / "card.json").read_text() == card_before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_replacement_keeps_the_analysis_and_swaps_the_rest(tmp_path: Path) -> None:
    (folder,) = build_tiny_models(tmp_path, kinds=RNN, seed=0)
    (folder / "analysis").mkdir()
    (folder / "analysis" / SUMMARY_FILE).write_text("{}")
    (other,) = build_tiny_models(tmp_path / "other", kinds=RNN, seed=1)
    loaded = load_model_folder(other)
    save_model_folder(folder, loaded.model, loaded.tokenizer, source_lang="en", target_lang="de", card={"n": 2},
                      dtype=torch.float32)
    assert (folder / "analysis" / SUMMARY_FILE).read_text() == "{}"
    assert json.loads((folder / "card.json").read_text()) == {"n": 2}
    after, wanted = _weights(folder), loaded.model.state_dict()
    assert all(torch.equal(wanted[k], after[k]) for k in wanted)


def test_a_save_never_replaces_a_folder_of_other_files(tmp_path: Path) -> None:
    (source,) = build_tiny_models(tmp_path / "built", kinds=RNN)
    loaded = load_model_folder(source)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not a model folder that attnscope wrote"):
        save_model_folder(tmp_path / "home", loaded.model, loaded.tokenizer, source_lang="en", target_lang="de")
    assert [p.name for p in (tmp_path / "home").iterdir()] == ["notes.txt"]


KILLER = """
import os, signal, sys
from pathlib import Path
from attnscope import repository
from attnscope.repository import load_model_folder, save_model_folder

def half_then_die(state, path, **_):
    Path(path).write_bytes(b"\\0" * 1000)
    os.kill(os.getpid(), signal.SIGKILL)

loaded = load_model_folder(sys.argv[1])
repository.save_file = half_then_die
save_model_folder(sys.argv[2], loaded.model, loaded.tokenizer, source_lang="en", target_lang="de", card={})
"""


def test_a_process_killed_mid_write_leaves_nothing_that_loads(tmp_path: Path, client_for: object) -> None:
    (source,) = build_tiny_models(tmp_path / "built", kinds=RNN)
    models = tmp_path / "models"
    (good,) = build_tiny_models(models, kinds=[k for k in TINY_KINDS if k[0] == "transformer"])
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLER), str(source), str(models / "killed")],
                          capture_output=True, timeout=120)  # fmt: skip
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert not (models / "killed").exists()
    leftovers = [p for p in models.iterdir() if p.name.startswith(".killed.partial-")]
    assert len(leftovers) == 1 and (leftovers[0] / "config.json").is_file()  # hidden, never discovered
    assert discover(models) == [good]
    with client_for(models) as c:  # type: ignore[operator]
        listing = c.get("/api/models").json()
        assert [m["id"] for m in listing["models"]] == [good.name] and listing["unavailable"] == []


def test_a_folder_without_its_marker_is_listed_broken_not_served(tmp_path: Path, client_for: object) -> None:
    """An import killed after its card (files written in place, as before): every file is there,
    the marker is not; the server names complete.json and never serves it with defaults."""
    models = tmp_path / "models"
    (folder,) = build_tiny_models(models, kinds=RNN)
    (folder / COMPLETE_FILE).unlink()
    with pytest.raises(ModelFolderError, match="not completely written") as caught:
        load_model_folder(folder)
    assert caught.value.file == COMPLETE_FILE
    with client_for(models) as c:  # type: ignore[operator]
        listing = c.get("/api/models").json()
        assert listing["models"] == []
        (entry,) = listing["unavailable"]
        assert entry["id"] == folder.name and entry["file"] == COMPLETE_FILE
        r = c.post("/api/translate", json={"model": folder.name, "text": "Hi"})
        assert r.status_code == 404 and COMPLETE_FILE in r.json()["detail"]
        assert c.get("/api/ready").status_code == 503  # nothing to serve (issue 45.6)
    with client_for(models, max_loaded_models=1) as c:  # type: ignore[operator]
        assert [u["file"] for u in c.get("/api/models").json()["unavailable"]] == [COMPLETE_FILE]
    assert seal(folder) == "model"  # checked by loading it, then marked
    assert load_model_folder(folder).id == folder.name


def test_seal_refuses_a_folder_that_does_not_load(tmp_path: Path) -> None:
    (folder,) = build_tiny_models(tmp_path, kinds=RNN)
    (folder / COMPLETE_FILE).unlink()
    (folder / WEIGHTS_FILE).write_bytes(b"\0" * 100)
    with pytest.raises(ModelFolderError, match=WEIGHTS_FILE):
        seal(folder)
    assert not (folder / COMPLETE_FILE).exists()


def test_the_seal_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from attnscope.cli import main

    good, bad = build_tiny_models(tmp_path, kinds=[k for k in TINY_KINDS if k[0] in ("transformer", "rnn-additive")])
    for folder in (good, bad):
        (folder / COMPLETE_FILE).unlink()
    (bad / WEIGHTS_FILE).write_bytes(b"\0" * 100)
    assert main(["seal", str(good), str(bad)]) == 1
    out = capsys.readouterr()
    assert f"sealed {good} (model)" in out.out and "Traceback" not in out.err
    assert f"attnscope seal: error: {bad}: " in out.err and WEIGHTS_FILE in out.err
    assert (good / COMPLETE_FILE).is_file() and not (bad / COMPLETE_FILE).exists()


def test_every_shipped_folder_is_sealed() -> None:
    from attnscope.config import REPO_ROOT

    folders = [p for p in (REPO_ROOT / "models").iterdir() if p.is_dir()]
    assert folders and all((p / COMPLETE_FILE).is_file() for p in folders)


def test_copying_a_sealed_folder_copies_a_loadable_folder(tmp_path: Path) -> None:
    (folder,) = build_tiny_models(tmp_path / "a", kinds=RNN)
    shutil.copytree(folder, tmp_path / "b" / folder.name)
    assert load_model_folder(tmp_path / "b" / folder.name).id == folder.name
