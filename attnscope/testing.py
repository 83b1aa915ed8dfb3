"""Tiny, quickly built model folders for tests and demos (random weights, real tokenizer)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from attnscope.config import REPO_ROOT
from attnscope.nn.config import ModelConfig, score_of
from attnscope.nn.factory import build_model
from attnscope.nn.family import family
from attnscope.repository import load_model_folder, save_model_folder
from attnscope.text.tokenizer import Tokenizer

TINY_PAIRS: list[tuple[str, str]] = [
    ("A man is riding a bicycle.", "Ein Mann fährt Fahrrad."),
    ("Two dogs play in the snow.", "Zwei Hunde spielen im Schnee."),
    ("A woman is reading a book.", "Eine Frau liest ein Buch."),
    ("Children are playing football in the park.", "Kinder spielen Fußball im Park."),
    ("A little girl climbs a tree.", "Ein kleines Mädchen klettert auf einen Baum."),
    ("The man in the red shirt is cooking.", "Der Mann im roten Hemd kocht."),
    ("A group of people stand outside a building.", "Eine Gruppe von Menschen steht vor einem Gebäude."),
    ("A black dog runs across the grass.", "Ein schwarzer Hund rennt über das Gras."),
    ("Two men are working on a roof.", "Zwei Männer arbeiten auf einem Dach."),
    ("A boy jumps into the water.", "Ein Junge springt ins Wasser."),
]

# (folder suffix, architecture, score: None for the Transformer, which has none)
TINY_KINDS: list[tuple[str, str, str | None]] = [
    ("transformer", "transformer", None),
    ("rnn-additive", "rnn", "additive"),
    ("rnn-none", "rnn", "none"),
    ("self-attentive", "self_attentive_rnn", "additive"),
]


def tiny_tokenizer(vocab_size: int = 120, *, byte_fallback: bool = False) -> Tokenizer:
    """A real SentencePiece model of the tiny corpus; with ``byte_fallback`` it needs at least
    ~300 pieces (its 256 byte pieces come on top of the characters), so it gets 400."""
    sentences = [s for pair in TINY_PAIRS for s in pair] * 3
    if byte_fallback:
        return Tokenizer.train(sentences, max(vocab_size, 400), byte_fallback=True)
    return Tokenizer.train(sentences, vocab_size)


def tiny_config(architecture: str, score: str | None, vocab_size: int) -> ModelConfig:
    """A tiny config of ``architecture`` (its family's :meth:`~attnscope.nn.family.Family.tiny_config`);
    ``score`` applies to the families with an alignment score (the RNNs) only."""
    config: ModelConfig = family(architecture).tiny_config(vocab_size, score)
    return config


def build_tiny_models(
    root: str | Path,
    pair: tuple[str, str] = ("en", "de"),
    seed: int = 0,
    *,
    kinds: list[tuple[str, str, str | None]] = TINY_KINDS,
    byte_fallback: bool = False,
) -> list[Path]:
    """Write one tiny random model folder per entry of ``kinds`` (default :data:`TINY_KINDS`)
    under ``root``, all sharing one tokenizer (byte fallback: lossless, like the shipped ones)."""
    root = Path(root)
    tokenizer = tiny_tokenizer(byte_fallback=byte_fallback)
    folders = []
    for suffix, architecture, score in kinds:
        torch.manual_seed(seed)
        config = tiny_config(architecture, score, tokenizer.vocab_size)
        model = build_model(config).eval()
        folder = root / f"{pair[0]}-{pair[1]}-{suffix}"
        card = {
            "id": folder.name,
            "architecture": architecture,
            "score": score_of(config),
            "parameters": model.num_parameters,
            "note": "tiny random model for tests",
        }
        save_model_folder(
            folder, model, tokenizer, source_lang=pair[0], target_lang=pair[1], card=card, dtype=torch.float32
        )
        folders.append(folder)
    return folders


def build_sharp_transformer(root: Path) -> Path:
    """A tiny Transformer folder (2 + 2 layers, 2 heads) under ``root`` with weights large enough
    (N(0, 0.7²), seed 0) that its output depends on the input and on single heads (the default
    tiny init repeats one token): what the head-ablation tests need."""
    (folder,) = build_tiny_models(root, kinds=[k for k in TINY_KINDS if k[0] == "transformer"])
    loaded = load_model_folder(folder, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in loaded.model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.7)
    save_model_folder(folder, loaded.model, loaded.tokenizer, source_lang="en", target_lang="de", card=loaded.card)
    return folder


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server_process(
    models_dir: str | Path,
    log: Path,
    start_timeout_s: float = 120.0,
    *,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    checkout: Path = REPO_ROOT,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``attnscope serve`` in its own process on a free localhost port, as a user would start it
    (``env``: extra ``ATTNSCOPE_*`` settings, ``args``: extra flags; ``checkout``: the source tree
    whose ``app`` package runs, e.g. another revision's worktree); yields its base URL and the
    process once ``/api/ready`` answers (models loaded), and stops it afterwards. If it dies or
    never answers, the error carries the end of its log."""
    port = free_port()
    command = [
        sys.executable, "-m", "attnscope.cli", "serve",
        "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", *args,
    ]  # fmt: skip
    # the models as the server's one repository (not --models-dir, which adds to the shipped
    # models; the variable reads the same in older checkouts, which bench/ compares against)
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {}), "ATTNSCOPE_MODELS_DIR": str(models_dir)}
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=checkout, stdout=sink, stderr=subprocess.STDOUT, env=environment)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while not _healthy(url):
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}:\n{log.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no answer from {url}/api/ready in {start_timeout_s} s:\n{log.read_text()[-4000:]}")
            time.sleep(0.2)
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def running_server(models_dir: str | Path, log: Path, start_timeout_s: float = 120.0, **options: Any) -> Iterator[str]:
    """:func:`server_process`, yielding only the base URL."""
    with server_process(models_dir, log, start_timeout_s, **options) as (url, _):
        yield url


def _healthy(url: str) -> bool:
    """Done loading: ``/api/ready`` is 200, or 503 ``no_models`` (a server with nothing to serve)."""
    try:
        with urllib.request.urlopen(f"{url}/api/ready", timeout=2) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as err:
        try:
            return bool(json.loads(err.read()).get("status") == "no_models")
        except (ValueError, OSError):  # a body that does not come in time on a busy machine: not yet
            return False
    except OSError:
        return False


def in_own_thread(body: Any) -> None:
    """Run ``body()`` in a thread of its own and raise its exception here. For tests that run an
    event loop (or Playwright's sync API) after the browser tests, whose session keeps an asyncio
    loop running in the main thread, where another cannot start."""
    import threading

    failures: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            failures.append(err)

    thread = threading.Thread(target=run, name="attnscope-test-loop")
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


def until(condition: Callable[[], bool], what: str, bound_s: float = 60.0) -> None:
    """Wait for a state, not a time: poll ``condition`` and fail with ``what`` only if it never
    holds within a generous bound (a slow, loaded machine waits longer; it never fails sooner)."""
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)
