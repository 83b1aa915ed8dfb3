"""Settings: defaults, ATTNSCOPE_* environment variables, validation, the cached instance."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import REPO_ROOT, Settings, default_data_dir, get_settings


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
