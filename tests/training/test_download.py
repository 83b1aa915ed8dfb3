"""``download`` against a local HTTP server on 127.0.0.1 (never the internet): every file lands,
files already there are kept, and a failed fetch is a DataError that leaves no partial file."""

from __future__ import annotations

import gzip
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnscope.training import data
from attnscope.training.data import SPLITS, DataError, download

LANGS = ("en", "de")
NAMES = sorted(f"{stem}.{lang}.gz" for stem in SPLITS.values() for lang in LANGS)


class Server:
    """Serves ``files`` (name -> bytes); a name in ``truncated`` gets a reply cut short."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.truncated: set[str] = set()
        self.requested: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                name = self.path.lstrip("/")
                server.requested.append(name)
                if name not in server.files:
                    self.send_error(404)
                    return
                body = server.files[name]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if name in server.truncated else body)
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/{{file}}"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    served = Server()
    served.files = {name: gzip.compress(f"a caption from {name}\n".encode()) for name in NAMES}
    monkeypatch.setattr(data, "DOWNLOAD_URL", served.url)
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # a proxy in the environment must not intercept
    thread = threading.Thread(target=served.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield served
    served.httpd.shutdown()
    served.httpd.server_close()
    thread.join()


def test_every_split_lands(server: Server, tmp_path: Path) -> None:
    target = tmp_path / "new" / "multi30k"
    assert download(target, langs=LANGS, timeout=5) == target
    assert sorted(p.name for p in target.iterdir()) == NAMES
    for name in NAMES:
        assert (target / name).read_bytes() == server.files[name]
    assert sorted(server.requested) == NAMES
    assert data.load_parallel(target, "test2016", "en", "de") == [
        ("a caption from test_2016_flickr.en.gz", "a caption from test_2016_flickr.de.gz")
    ]


def test_existing_files_are_kept_and_not_fetched(server: Server, tmp_path: Path) -> None:
    (tmp_path / "train.en.gz").write_bytes(b"already here")
    download(tmp_path, langs=LANGS, timeout=5)
    assert (tmp_path / "train.en.gz").read_bytes() == b"already here"
    assert "train.en.gz" not in server.requested
    assert sorted(server.requested) == [n for n in NAMES if n != "train.en.gz"]


def assert_no_partial_files(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".part")]


def test_an_unreachable_server_is_a_data_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(data, "DOWNLOAD_URL", f"http://127.0.0.1:{port}/{{file}}")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    with pytest.raises(DataError, match=f"could not download http://127.0.0.1:{port}/"):
        download(tmp_path, langs=LANGS, timeout=5)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_is_a_data_error_and_earlier_files_stay_whole(
    server: Server, tmp_path: Path
) -> None:
    del server.files["val.en.gz"]
    with pytest.raises(DataError, match="val.en.gz.*404"):
        download(tmp_path, langs=LANGS, timeout=5)
    assert_no_partial_files(tmp_path)
    assert not (tmp_path / "val.en.gz").exists()
    for path in tmp_path.iterdir():
        assert path.read_bytes() == server.files[path.name]
    assert (tmp_path / "train.de.gz").is_file()  # fetched before val; a retry keeps it


def test_a_reply_cut_short_is_a_data_error_with_no_file_left(
    server: Server, tmp_path: Path
) -> None:
    server.truncated = {"train.en.gz"}
    with pytest.raises(DataError, match="train.en.gz"):
        download(tmp_path, langs=LANGS, timeout=5)
    assert list(tmp_path.iterdir()) == []
