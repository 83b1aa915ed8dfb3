"""Start-up: models found and loaded, broken folders logged and left out, device choice,
`attnscope serve` wiring its flags into the settings; over HTTP, a start that nothing left
behind can block (stale locks, a half-written or missing native build, a start killed while
loading) and that a signal stops while it loads."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch

from attnscope.config import REPO_ROOT, Settings
from attnscope.device import resolve_device
from attnscope.engine.service import ModelService
from attnscope.nn.native import library
from attnscope.serving import server
from attnscope.testing import free_port, server_process


def test_broken_folders_are_listed_unavailable_with_the_file_at_fault(
    tmp_path: Path, tiny_models_dir: Path, client_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    shutil.copytree(tiny_models_dir / "en-de-transformer", tmp_path / "en-de-transformer")
    shutil.copytree(tiny_models_dir / "en-de-rnn-none", tmp_path / "no-weights")
    (tmp_path / "no-weights" / "model.safetensors").unlink()
    (tmp_path / "bad-json").mkdir()
    (tmp_path / "bad-json" / "config.json").write_text("{not json")
    shutil.copytree(tiny_models_dir / "en-de-rnn-none", tmp_path / "wrong-weights")
    shutil.copy(tiny_models_dir / "en-de-transformer" / "model.safetensors", tmp_path / "wrong-weights")
    (tmp_path / "not-a-model").mkdir()  # no config.json: not even discovered
    shutil.copytree(tiny_models_dir / "en-de-rnn-none", tmp_path / "bad-card")
    (tmp_path / "bad-card" / "card.json").write_text('{"bleu": 3')
    with caplog.at_level(logging.INFO, logger="attnscope.engine.registry"), client_for(tmp_path) as c:
        assert c.get("/api/health").json()["models"] == 2
        assert c.get("/api/ready").json() == {
            "status": "ready", "models": 2, "unavailable": 3, "loaded": 5, "total": 5
        }
        listing = c.get("/api/models").json()
        assert [m["id"] for m in listing["models"]] == ["bad-card", "en-de-transformer"]
        bad_card = listing["models"][0]
        assert bad_card["card"] == {} and len(bad_card["warnings"]) == 1
        assert "card.json" in bad_card["warnings"][0] and "without its card" in bad_card["warnings"][0]
        unavailable = {u["id"]: u for u in listing["unavailable"]}
        assert sorted(unavailable) == ["bad-json", "no-weights", "wrong-weights"]
        assert unavailable["bad-json"]["file"] == "config.json"
        assert unavailable["bad-json"]["reason"].startswith("config.json: ")
        assert unavailable["no-weights"] == {
            "id": "no-weights", "file": "model.safetensors", "reason": "missing model.safetensors"
        }
        assert unavailable["wrong-weights"]["file"] == "model.safetensors" and len(unavailable["wrong-weights"]["reason"]) < 500
        assert "do not match config.json" in unavailable["wrong-weights"]["reason"]
        r = c.post("/api/translate", json={"model": "no-weights", "text": "Hi"})
        assert r.status_code == 404 and "unavailable (missing model.safetensors)" in r.json()["detail"]
        assert c.post("/api/translate", json={"model": "bad-card", "text": "Hi"}).status_code == 200
        page = c.get("/models").text
        cards_json = page.split('<script type="application/json" id="cards-data">')[1].split("</script>")[0]
        page_cards = {card["id"]: card for card in json.loads(cards_json)}
        assert "model.safetensors" in page_cards["no-weights"]["error"]
        assert page_cards["bad-json"]["error"].startswith("config.json: ")
        assert page_cards["bad-card"]["warnings"] == bad_card["warnings"]
    skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(skipped) == 3
    assert any("no-weights" in m and "model.safetensors" in m for m in skipped)
    assert any("bad-json" in m for m in skipped)
    assert any("wrong-weights" in m and "do not match" in m for m in skipped)


def test_missing_models_dir_still_starts(tmp_path: Path, client_for: Any) -> None:
    with client_for(tmp_path / "nowhere") as c:
        assert c.get("/api/health").json() == {"status": "ok", "device": "cpu", "models": 0}
        assert c.get("/api/models").json() == {"models": [], "unavailable": []}
        r = c.get("/api/ready")  # issue 45.6: alive, but not ready to serve (no model at all)
        assert r.status_code == 503 and r.json()["status"] == "no_models"
        assert "no model is loaded from" in r.json()["detail"] and "nowhere" in r.json()["detail"]
        r = c.post("/api/translate", json={"model": "any", "text": "Hi"})
        assert r.status_code == 404 and "none are loaded" in r.json()["detail"]


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(None) == torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu-please")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")


def test_service_puts_models_on_its_device(tiny_models_dir: Path) -> None:
    service = ModelService(Settings(models_dir=tiny_models_dir, device="cpu"))
    service.load_all()
    assert sorted(service.ids) == sorted(p.name for p in tiny_models_dir.iterdir())
    for model_id in service.ids:
        assert service.get(model_id).loaded.model.device == torch.device("cpu")
        assert not service.get(model_id).loaded.model.training


def test_serve_passes_flags_over_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(server.uvicorn, "run", lambda app, **kw: seen.update(kw, app=app))
    monkeypatch.setattr(server, "check_port", lambda host, port: None)  # 9001 may be taken on this machine
    monkeypatch.setenv("ATTNSCOPE_PORT", "9001")
    monkeypatch.setenv("ATTNSCOPE_MAX_CHARS", "50")
    server.run(host="127.0.0.1", port=None, models_dir=str(tmp_path), device="cpu")
    assert (seen["host"], seen["port"]) == ("127.0.0.1", 9001)
    settings = seen["app"].state.settings
    assert (settings.models_dir, settings.device, settings.max_chars) == (tmp_path, "cpu", 50)


def test_serve_refuses_an_unknown_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server.uvicorn, "run", lambda *a, **k: pytest.fail("must not start"))
    with pytest.raises(ValueError, match="unknown device"):
        server.run(device="quantum")


def test_static_files_are_mounted_when_the_folder_exists(client: Any) -> None:
    from attnscope.serving.main import STATIC_DIR

    routes = {getattr(route, "path", None) for route in client.app.routes}
    assert ("/static" in routes) == STATIC_DIR.is_dir()


# -- start-up over HTTP: nothing compiles, nothing left behind blocks, SIGTERM always ends it ----


def _slow_models_dir(root: Path, tiny_models_dir: Path, copies: int = 1500) -> Path:
    """``copies`` folders of a tiny model (symlinked files): a start-up whose loading takes
    seconds, so it can be interrupted while it loads."""
    source = tiny_models_dir / "en-de-rnn-none"
    for i in range(copies):
        folder = root / f"m{i:04d}"
        folder.mkdir(parents=True)
        for file in source.iterdir():
            (folder / file.name).symlink_to(file)
    return root


def _start(models_dir: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "attnscope.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--models-dir", str(models_dir), "--only-models-dir", "--device", "cpu"]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT, env=dict(os.environ))
    return process, f"http://127.0.0.1:{port}"


def _ready_body(url: str) -> dict[str, Any] | None:
    """/api/ready's JSON (any status), or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"{url}/api/ready", timeout=2) as response:
            return dict(json.load(response))
    except urllib.error.HTTPError as err:
        return dict(json.load(err))
    except OSError:
        return None


def _wait_loading(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while (body := _ready_body(url)) is None or body["status"] != "loading":
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        assert body is None or body["status"] != "ready", "loaded before it could be interrupted"
        time.sleep(0.1)


def _stopped(process: subprocess.Popen[bytes], sig: int, bound_s: float = 60) -> int:
    process.send_signal(sig)
    try:
        return process.wait(timeout=bound_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"the server did not stop within {bound_s} s of signal {sig}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_loading_stops_the_server(
    sig: int, tmp_path: Path, tiny_models_dir: Path
) -> None:
    models = _slow_models_dir(tmp_path / "models", tiny_models_dir)
    log = tmp_path / "serve.log"
    process, url = _start(models, log)
    _wait_loading(process, url, log)
    assert _stopped(process, sig) in (0, -sig, 128 + sig)
    text = log.read_text()
    assert "stopped loading: shutting down after" in text and "of 1500 model(s)" in text
    assert "loading m0000 (1 of 1500)" in text


def test_a_start_killed_while_loading_then_a_normal_start_is_ready(
    tmp_path: Path, tiny_models_dir: Path
) -> None:
    models = _slow_models_dir(tmp_path / "models", tiny_models_dir)
    log = tmp_path / "killed.log"
    process, url = _start(models, log)
    _wait_loading(process, url, log)
    process.kill()
    process.wait()
    with server_process(tiny_models_dir, tmp_path / "serve.log", start_timeout_s=120) as (url, _):
        with urllib.request.urlopen(f"{url}/api/ready") as response:
            assert json.load(response)["models"] == len(list(tiny_models_dir.iterdir()))


def test_stale_locks_and_no_native_build_never_block_start_up(tmp_path: Path, tiny_models_dir: Path) -> None:
    """The locks an interrupted build leaves (torch's in its extensions folder, as before the
    build moved to install time, and a dead temporary build of ours), a half-written library and
    then none at all: the server logs that it takes the Python step, becomes ready and translates."""
    torch_dir, native_dir = tmp_path / "torch_extensions", tmp_path / "native"
    (torch_dir / "py311_cpu" / "attnscope_native").mkdir(parents=True)
    (torch_dir / "py311_cpu" / "attnscope_native" / "lock").touch()
    (native_dir / ".build-dead").mkdir(parents=True)
    (native_dir / ".build-dead" / "lock").touch()
    (native_dir / library.library_path().name).write_bytes(b"\x7fELF\x02\x01 truncated")
    env = {"TORCH_EXTENSIONS_DIR": str(torch_dir), "ATTNSCOPE_NATIVE_DIR": str(native_dir)}
    for attempt in ("half-written", "none"):
        log = tmp_path / f"{attempt}.log"
        with server_process(tiny_models_dir, log, start_timeout_s=120, env=env) as (url, _):
            request = urllib.request.Request(
                f"{url}/api/translate", data=json.dumps({"model": "en-de-transformer", "text": "A man."}).encode(),
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request) as response:
                assert json.load(response)["translation"]
        text = log.read_text()
        assert "using the Python step because" in text
        assert ("could not be loaded" in text) == (attempt == "half-written")
        assert "loaded en-de-transformer" in text and "loading en-de-transformer (" in text
        (native_dir / library.library_path().name).unlink(missing_ok=True)
