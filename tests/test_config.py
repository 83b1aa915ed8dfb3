"""Settings: defaults, ATTNSCOPE_* environment variables, validation, the cached instance."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from attnscope.config import (
    IN_CHECKOUT,
    REPO_ROOT,
    Settings,
    current,
    default_data_dir,
    get_settings,
    shipped,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MODELS_DIR", "DATA_DIR", "DEVICE", "HOST", "PORT", "MAX_CHARS", "MAX_TOKENS", "MAX_BATCH", "TORCH_THREADS"):
        monkeypatch.delenv(f"ATTNSCOPE_{name}", raising=False)


def test_defaults() -> None:
    s = Settings()
    assert s.models_dir == REPO_ROOT / "models"
    assert (s.device, s.host, s.port) == (None, "127.0.0.1", 8000)
    assert (s.max_chars, s.max_tokens, s.max_batch, s.torch_threads) == (1000, 200, 32, 1)
    shared = REPO_ROOT.parent / "shared" / "data" / "multi30k"
    assert s.data_dir == default_data_dir() == (shared if shared.is_dir() else Path.home() / ".cache" / "attnscope" / "multi30k")


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATTNSCOPE_MODELS_DIR", str(tmp_path))
    monkeypatch.setenv("ATTNSCOPE_DEVICE", "cpu")
    monkeypatch.setenv("ATTNSCOPE_PORT", "8123")
    monkeypatch.setenv("ATTNSCOPE_MAX_CHARS", "20")
    s = Settings()
    assert (s.models_dir, s.device, s.port, s.max_chars) == (tmp_path, "cpu", 8123, 20)


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSCOPE_PORT", "8123")
    assert Settings(port=9000).port == 9000


def test_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSCOPE_DEVICE", "")
    monkeypatch.setenv("ATTNSCOPE_PORT", "")
    assert (Settings().device, Settings().port) == (None, 8000)


@pytest.mark.parametrize(("name", "value"), [("PORT", "http"), ("PORT", "70000"), ("MAX_CHARS", "0"), ("MAX_BATCH", "-1")])
def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(f"ATTNSCOPE_{name}", value)
    with pytest.raises(ValidationError, match=name.lower()):
        Settings()


def test_get_settings_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    get_settings.cache_clear()
    try:
        monkeypatch.setenv("ATTNSCOPE_MAX_TOKENS", "77")
        first = get_settings()
        monkeypatch.setenv("ATTNSCOPE_MAX_TOKENS", "88")
        assert get_settings() is first and first.max_tokens == 77
    finally:
        get_settings.cache_clear()


APP = REPO_ROOT / "attnscope"


def _environment_reads(tree: ast.AST) -> list[str]:
    """The constant names a module reads with os.environ.get/[...]/os.getenv."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = ast.unparse(node.func)
            if func in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                names.append(str(node.args[0].value))
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
            if isinstance(node.slice, ast.Constant) and isinstance(node.ctx, ast.Load):
                names.append(str(node.slice.value))
    return names


def test_no_attnscope_variable_is_read_outside_settings() -> None:
    """Every ATTNSCOPE_* switch is a Settings field, read through attnscope.config (get_settings or
    current), never with os.environ elsewhere in attnscope/."""
    stray = {
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in APP.rglob("*.py")
        if path.name != "config.py" or path.parent != APP
        for name in _environment_reads(ast.parse(path.read_text(encoding="utf-8")))
        if name.startswith("ATTNSCOPE_")
    }
    assert not stray


def test_every_variable_named_in_the_code_is_a_setting() -> None:
    """A variable named in a message or docstring exists: ATTNSCOPE_<FIELD> for a Settings field."""
    fields = {f"ATTNSCOPE_{name.upper()}" for name in Settings.model_fields}
    named = {m for path in APP.rglob("*.py") for m in re.findall(r"ATTNSCOPE_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8"))}
    prefixes = {"ATTNSCOPE_CLIENT"}  # "ATTNSCOPE_CLIENT_*_TIMEOUT_S", a family of fields
    assert named - fields - prefixes == set()


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [("native", "", True), ("native", "off", False), ("native", "0", False), ("native", "1", True),
     ("cuda_graphs", "", True), ("cuda_graphs", "yes", True), ("native_dir", "", None)],
)
def test_current_reads_a_switch_afresh(monkeypatch: pytest.MonkeyPatch, name: str, raw: str, value: object) -> None:
    monkeypatch.setenv(f"ATTNSCOPE_{name.upper()}", raw)
    assert current(name) == value == (getattr(Settings(), name) if raw else Settings.model_fields[name].default)


def test_current_refuses_what_settings_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSCOPE_NATIVE", "perhaps")
    with pytest.raises(ValidationError):
        current("native")
    with pytest.raises(ValidationError, match="native"):
        Settings()


def test_fashion_mnist_dir_is_one_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from attnscope.vision import data

    monkeypatch.delenv("ATTNSCOPE_FASHION_MNIST_DIR", raising=False)
    assert data.data_dir() == Settings().fashion_mnist_dir == data.DEFAULT_DIR
    monkeypatch.setenv("ATTNSCOPE_FASHION_MNIST_DIR", str(tmp_path))
    assert data.data_dir() == Settings().fashion_mnist_dir == tmp_path
    assert data.data_dir(tmp_path / "flag") == tmp_path / "flag"  # a command's --data-dir wins


def test_shipped_folders_are_the_checkouts_here() -> None:
    assert IN_CHECKOUT
    assert {shipped(name) for name in ("static", "templates", "models")} == {REPO_ROOT / n for n in ("static", "templates", "models")}
    with pytest.raises(ValueError, match="not shipped"):
        shipped("runs")
