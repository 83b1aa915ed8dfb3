"""What a new user's first mistakes get from the ``attnscope`` command: one line naming the
problem, never argparse's usage block or a traceback. No model is loaded: each case stops before."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import attnscope.hf.importer
from attnscope.cli import main
from attnscope.hf import ImportFailure


def error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" not in err, err
    return [line for line in err.splitlines() if line.strip() and " INFO " not in line]


def test_no_command_names_the_commands_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    (line,) = error_lines(capsys)
    assert line.startswith("attnscope: error: name a command: serve, build-native, train, evaluate")
    assert "attnscope --help" in line


@pytest.fixture
def repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A model repository (ATTNSCOPE_MODELS_DIR) holding one folder, en-de-x, that is not a
    complete model: evaluating it stops at its missing config.json, before any loading."""
    root = tmp_path / "repository"
    (root / "en-de-x").mkdir(parents=True)
    monkeypatch.setenv("ATTNSCOPE_MODELS_DIR", str(root))
    monkeypatch.chdir(tmp_path)  # no folder called en-de-x here
    return root


def test_a_model_id_is_the_repositorys_folder(repository: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "en-de-x"]) == 2
    (line,) = error_lines(capsys)
    assert line == f"attnscope evaluate: error: {repository / 'en-de-x'}: missing config.json"


@pytest.mark.parametrize("command", ["evaluate", "distill", "analyze", "vision-evaluate"])
def test_an_unknown_model_lists_the_ids(
    command: str, repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = {"distill": ["--out", "x.tsv"], "analyze": ["--corpus", "x.txt", "--out", "out"]}.get(command, [])
    assert main([command, "en-de-typo", *extra]) == 2
    (line,) = error_lines(capsys)
    assert line == (f"attnscope {command}: error: 'en-de-typo' is neither a model folder nor a model id "
                    f"in {repository} (its ids: en-de-x)")  # fmt: skip


def test_a_missing_folder_path_is_named(repository: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "models/en-de-x"]) == 2
    assert error_lines(capsys) == ["attnscope evaluate: error: models/en-de-x: no such model folder"]


def test_serve_refuses_a_missing_models_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert main(["serve", "--models-dir", str(missing), "--port", "1"]) == 2  # before anything binds
    assert error_lines(capsys) == [f"attnscope serve: error: --models-dir {missing}: no such folder"]


@pytest.mark.parametrize(
    ("raised", "line", "code"),
    [
        (ImportFailure("could not fetch 'x/y' from the hub: ConnectError\nPlease check your connection."),
         "attnscope import: error: could not fetch 'x/y' from the hub: ConnectError Please check your connection.", 2),
        (PermissionError(13, "Permission denied", "/out"),
         "attnscope import: error: [Errno 13] Permission denied: '/out'", 2),
        (KeyboardInterrupt(), "attnscope import: interrupted", 130),
    ],
)  # fmt: skip
def test_a_library_error_is_one_line(
    raised: BaseException, line: str, code: int, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fails(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(attnscope.hf.importer, "import_model", fails)
    assert main(["import", "x/y", "--out", "out"]) == code
    assert error_lines(capsys) == [line]


def test_serve_on_a_port_in_use_says_so_before_loading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "models").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--models-dir", str(tmp_path / "models"),
                "--only-models-dir", "--device", "cpu"]  # fmt: skip
        assert main(args) == 2
    (line,) = [line for line in error_lines(capsys) if "attnscope" in line and " WARNING " not in line]
    assert line.startswith(f"attnscope serve: error: cannot listen on 127.0.0.1:{port} (")
    assert line.endswith("another server there? pass --port (or ATTNSCOPE_PORT)")
