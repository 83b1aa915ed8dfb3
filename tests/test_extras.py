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


@pytest.mark.parametrize(("mode", "hint"), [(None, "set RAY_AUTH_MODE=token"), ("token", "is the token the cluster's?")])
def test_a_refused_join_says_what_to_set(monkeypatch: pytest.MonkeyPatch, mode: str | None, hint: str) -> None:
    """Ray 2.60's ``ray start --head`` turns token authentication on where ~/.ray/auth_token exists,
    and ``ray.init(address=...)`` sends no token unless RAY_AUTH_MODE=token: the GCS refuses it
    and Ray says only "Failed to connect" (seen on a real head, docs/ray.md). The one line names
    what to set; once it is set, it asks whether the token is the cluster's."""
    ray = pytest.importorskip("ray")
    from attnscope.extras import ClusterUnavailable, join_ray

    def refused(**_: object) -> None:
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda address=None, **kw: refused())
    if mode is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", mode)
    with pytest.raises(ClusterUnavailable) as err:
        join_ray("127.0.0.1:6379", cpus=1)
    message = str(err.value)
    assert "\n" not in message and message.startswith("cannot join the Ray cluster at 127.0.0.1:6379: Failed to connect")
    assert hint in message and "RAY_AUTH_TOKEN" in message
