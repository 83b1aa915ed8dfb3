"""One boundary for optional packages (attnscope.extras): ``require`` names the extra to install,
and the command line turns a missing one into one line on stderr and exit status 2."""

from __future__ import annotations

import sys

import pytest

from attnscope.cli import main
from attnscope.extras import MissingExtra, OptionalEngineError, require


def test_require_returns_the_module() -> None:
    assert require("json", "none") is sys.modules["json"]


def test_a_missing_module_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "eflomal", None)  # import eflomal now fails
    with pytest.raises(MissingExtra, match=r"^align-corpus needs eflomal .*: pip install 'attnscope\[align\]'$") as err:
        require("eflomal", "align", purpose="align-corpus")
    assert isinstance(err.value, OptionalEngineError)
    assert (err.value.module, err.value.extra, err.value.hint) == ("eflomal", "align", "pip install 'attnscope[align]'")


def test_the_command_line_prints_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    assert main(["analyze", "no-model", "--corpus", "no-corpus", "--out", "no-out"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("attnscope analyze: error: ") and err.endswith("pip install 'attnscope[analysis]'")
