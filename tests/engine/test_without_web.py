"""The engine is usable without the web layer: a fresh interpreter loads a tiny model, admits,
batches and translates (with an explanation) through ``attnscope.engine`` alone, and never
imports FastAPI, Starlette or uvicorn (docs/architecture.md: the engine sits below the web)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from attnscope.config import REPO_ROOT

SCRIPT = """
import asyncio, json, sys
from attnscope.config import Settings
from attnscope.engine.explain import Extras
from attnscope.engine.request import ServiceRequest
from attnscope.engine.service import ModelService
from attnscope.testing import TINY_KINDS, build_tiny_models

build_tiny_models(sys.argv[1], kinds=TINY_KINDS[:1])
service = ModelService(Settings(models_dir=sys.argv[1], device="cpu", inference_threads=1))
service.load_all()
request = ServiceRequest(
    model="en-de-transformer", texts=("A man is riding a bicycle.", "Two dogs play."), beam_size=2,
    max_length=6, batch=True, extras=Extras(explain=("rollout",)),
)
answers = asyncio.run(service.translate(request))
service.stop()
web = sorted(name for name in sys.modules if name.split(".")[0] in ("fastapi", "starlette", "uvicorn"))
print(json.dumps({
    "ids": service.ids,
    "tokens": [a.target_tokens for a in answers],
    "layers": [len(a.attention["cross"]) for a in answers],
    "explained": [a.explanations is not None and a.explanations.rollout is not None for a in answers],
    "web": web,
}))
"""


def test_the_engine_translates_without_the_web_layer(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "models")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["web"] == [], f"the engine imported the web stack: {got['web']}"
    assert got["ids"] == ["en-de-transformer"]
    assert len(got["tokens"]) == 2 and all(tokens for tokens in got["tokens"])
    assert got["layers"] == [2, 2]
    assert got["explained"] == [True, True]
