"""The mistakes of a notebook's first cell, each one line: a client that gets no HTTP answer (no
server on the port, a server that never answers, a URL without its scheme), a misspelt keyword
to ``attnscope.load`` (server settings are pydantic fields that would ignore it)."""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

import pytest

import attnscope
from attnscope.api.client import RemoteModel
from attnscope.api.frames import dataset, long_frame
from attnscope.api.local import LocalModel
from attnscope.extras import MissingExtra
from attnscope.widget import view_widget


def test_no_server_on_the_port_is_a_connection_error() -> None:
    with socket.socket() as s:  # a local port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError) as err:
        attnscope.Client(f"http://127.0.0.1:{port}", retries=0).health()
    assert str(err.value).startswith(f"cannot reach http://127.0.0.1:{port}/api/health (")
    assert "attnscope serve" in str(err.value) and "\n" not in str(err.value)


def test_a_server_that_never_answers_is_a_timeout() -> None:
    with socket.socket() as s:  # accepts the connection (backlog) but never reads or answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(TimeoutError, match=r"/api/models: no answer within 0.2 s \(Client\(url, timeout_s"):
            attnscope.Client(url, timeout_s=0.2).models()


def test_a_url_without_its_scheme_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="such as http://localhost:8000; got 'localhost:8000'"):
        attnscope.Client("localhost:8000")


def test_a_misspelt_load_keyword_is_named_before_loading() -> None:
    with pytest.raises(TypeError, match=r"^load\(\) got an unknown keyword 'devcie' \(did you mean 'device'\?\)"):
        attnscope.load("no-such-model", devcie="cuda")  # raised before the id is even looked up
    with pytest.raises(TypeError, match=r"unknown keyword 'beam_size': the keywords past device"):
        attnscope.load("no-such-model", beam_size=5)  # a request option, not a setting


@pytest.mark.parametrize(
    ("module", "call", "purpose"),
    [("pandas", long_frame, "to_pandas()"), ("xarray", dataset, "to_xarray()"), ("anywidget", view_widget, "result.show()")],
)  # fmt: skip
def test_a_missing_notebook_package_names_the_extra(
    module: str, call: object, purpose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pip install attnscope`` has no pandas: the README's ``to_pandas()`` says what to install."""
    monkeypatch.setitem(sys.modules, module, None)  # importing it now fails
    with pytest.raises(MissingExtra, match=rf"^{purpose.replace('(', '.').replace(')', '.')} needs {module} .*: "
                                           r"pip install 'attnscope\[notebook\]'$") as err:  # fmt: skip
        call(None)  # type: ignore[operator]
    assert isinstance(err.value, ImportError)  # what Python's own missing module is



def test_one_str_to_translate_batch_is_refused_not_split_into_characters(
    local_models: dict[str, LocalModel],
) -> None:
    remote = RemoteModel(attnscope.Client("http://127.0.0.1:1"), "en-de-transformer", {})  # never reached
    for model in (local_models["en-de-transformer"], remote):
        with pytest.raises(TypeError, match=r"^texts: give a list of sentences, not one str \(translate\(\) takes one\)$"):
            model.translate_batch("A dog runs.")


def test_an_id_in_a_missing_or_empty_models_dir_says_which(tmp_path: Path) -> None:
    with pytest.raises(attnscope.ModelNotFound, match=rf"^unknown model 'en-de-x'; {re.escape(str(tmp_path / 'nope'))} does not exist$"):
        attnscope.load("en-de-x", models_dir=tmp_path / "nope")
    with pytest.raises(attnscope.ModelNotFound, match=rf"^unknown model 'en-de-x'; {re.escape(str(tmp_path))} holds no model folders$"):
        attnscope.load("en-de-x", models_dir=tmp_path)
