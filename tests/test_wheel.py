"""A wheel install (``pip install .``, not editable) carries the pages and the models and serves
them from any directory.

The wheel is built from a copy of the checkout whose ``models/`` holds one tiny model (the
shipped ones are ~200 MB), with the real pyproject.toml and setup.py, then unpacked as pip
would install it and served from another directory: the installed package must find its
templates, static files and models inside itself (``attnscope/shipped/``), not beside a checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from attnscope.config import REPO_ROOT

COPIED = ("pyproject.toml", "setup.py", "README.md", "attnscope", "static", "templates")
SERVE = """
import sys, time
from fastapi.testclient import TestClient
import attnscope
from attnscope.config import IN_CHECKOUT, Settings, shipped
from attnscope.serving.main import create_app

assert attnscope.__file__.startswith(sys.argv[1]), attnscope.__file__
assert not IN_CHECKOUT
try:
    import app  # noqa: F401
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("a top-level 'app' is importable from the installed package")
settings = Settings(device="cpu")
assert settings.models_dir == shipped("models"), settings.models_dir
assert str(settings.data_dir).startswith(str(__import__("pathlib").Path.home())), settings.data_dir
with TestClient(create_app(settings), base_url="http://localhost") as client:
    deadline = time.monotonic() + 60
    while client.get("/api/ready").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert [m["id"] for m in client.get("/api/models").json()["models"]] == [sys.argv[2]]
    page = client.get("/")
    assert page.status_code == 200 and 'id="beam"' in page.text, page.status_code
    script = client.get("/static/js/translate.js")
    assert script.status_code == 200 and "beamSize" in script.text
    assert client.get("/vision").status_code == 200
# the Python API (issue 44) from the install: a shipped model by id, and the views' page
result = attnscope.load(sys.argv[2], device="cpu").translate("A dog runs.", beam_size=1, max_length=5)
assert result.attention["cross"].shape[2:] == (len(result.target_tokens), len(result.source_tokens))
assert "drawHeatmap" in result.to_html()  # the installed static/js
print("served")
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> tuple[Path, str]:
    """The built wheel and the id of the one model it ships."""
    source = tmp_path_factory.mktemp("checkout")
    for name in COPIED:
        origin = REPO_ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        else:
            shutil.copy2(origin, source / name)
    model = "en-de-transformer"
    shutil.copytree(tiny_models_dir / model, source / "models" / model)
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(dist), str(source)],
        capture_output=True, text=True, timeout=300, cwd=dist,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (path,) = dist.glob("attnscope-*.whl")
    return path, model


def test_the_wheel_carries_pages_models_and_native_sources(wheel: tuple[Path, str]) -> None:
    path, model = wheel
    names = set(zipfile.ZipFile(path).namelist())
    for wanted in (
        "attnscope/shipped/templates/translate.html",
        "attnscope/shipped/templates/vision.html",
        "attnscope/shipped/static/js/translate.js",
        f"attnscope/shipped/models/{model}/config.json",
        f"attnscope/shipped/models/{model}/card.json",
        "attnscope/nn/native/beam.cpp",
        "attnscope/config.py",
        "attnscope/widget/view.js",  # the notebook views' glue (issue 44), beside the pages' modules
        "attnscope/shipped/static/js/heatmap.js",
        "attnscope/shipped/static/css/app.css",
    ):
        assert wanted in names, wanted
    assert not any(name.startswith(("tests/", "bench/", "attnscope/shipped/models/en-de-rnn")) for name in names)
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"attnscope"}, top  # one import package: no top-level `app` to collide with another's
    entry = zipfile.ZipFile(path).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "attnscope = attnscope.cli:main" in entry, entry


def test_the_installed_package_serves_from_elsewhere(wheel: tuple[Path, str], tmp_path: Path) -> None:
    path, model = wheel
    site = tmp_path / "site-packages"
    zipfile.ZipFile(path).extractall(site)  # what pip puts in site-packages
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSCOPE_")}
    env["PYTHONPATH"] = str(site)  # ahead of the checkout's editable install
    served = subprocess.run(
        [sys.executable, "-c", SERVE, str(site), model], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300
    )
    assert served.returncode == 0, served.stderr[-3000:]
    assert served.stdout.strip().endswith("served")
