"""Folders written whole or not at all: a temporary name, a completion marker, one rename.

Every folder attnscope writes and a server (or a later command) trusts — a model folder from
``import`` or ``train``, a vision model folder, an ``analyze`` output — is written under a
hidden temporary name beside its target (``.<name>.partial-<pid>-<token>``), checked there, given
a completion marker (``complete.json``: what was written, file by file, with its size) and
renamed into place. A process killed at any moment leaves either the old folder, or the new one
complete with its marker, or no folder at that name; never a half-written one that loads. A
folder without the marker (written before this rule, or copied half-way) is refused by the
loaders with an error naming ``complete.json``; ``attnscope seal FOLDER`` checks such a folder
by loading it and adds the marker.

The hidden staging folders are skipped by every discovery (their names start with a dot); one
left by a killed process is harmless and can be deleted.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

COMPLETE_FILE = "complete.json"
OPTIONAL_FILES = ("card.json",)  # listed in the marker, but a folder may lose them (the card is informative)
MARKER_VERSION = 1


class IncompleteFolder(ValueError):
    """A folder without a (readable) completion marker: an interrupted write, never trusted."""

    def __init__(self, folder: Path, message: str) -> None:
        self.folder = folder
        super().__init__(message)


def staging_name(target: Path, what: str = "partial") -> Path:
    """A hidden sibling of ``target`` no other process will pick: ``.<name>.<what>-<pid>-<token>``."""
    return target.parent / f".{target.name}.{what}-{os.getpid()}-{secrets.token_hex(4)}"


def write_marker(folder: Path, kind: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``complete.json`` into ``folder``: the kind of folder and every file's size (the
    marker itself and sub-folders left out). Written last, so its presence means the rest is there."""
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file() and p.name != COMPLETE_FILE}
    marker = {"complete": True, "version": MARKER_VERSION, "kind": kind, "files": files, **(extra or {})}
    write_text_atomic(folder / COMPLETE_FILE, json.dumps(marker, indent=1) + "\n")
    return marker


def read_marker(folder: Path, kind: str) -> dict[str, Any]:
    """``folder``'s marker; IncompleteFolder naming ``complete.json`` when it is missing, is not
    a marker of ``kind``, or lists a file that is not there."""
    path = folder / COMPLETE_FILE
    if not path.is_file():
        raise IncompleteFolder(
            folder,
            f"no {COMPLETE_FILE}: the folder was not completely written (an interrupted import, "
            f"train or copy?), so it is not loaded; write it again, or check it with `attnscope seal {folder}`",
        )
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise IncompleteFolder(folder, f"{COMPLETE_FILE} is not readable: {err}") from err
    if not isinstance(marker, dict) or marker.get("complete") is not True or not isinstance(marker.get("files"), dict):
        raise IncompleteFolder(folder, f"{COMPLETE_FILE} is not a completion marker")
    if marker.get("kind") != kind:
        raise IncompleteFolder(folder, f"{COMPLETE_FILE} marks a {marker.get('kind')!r} folder, not a {kind!r} one")
    missing = sorted(n for n in marker["files"] if n not in OPTIONAL_FILES and not (folder / n).is_file())
    if missing:
        raise IncompleteFolder(folder, f"{COMPLETE_FILE} lists {', '.join(missing)}, which the folder lacks")
    return marker


def write_text_atomic(path: Path, text: str) -> None:
    """``path`` holds the old text or the new one, never a part: a temporary file, then a rename."""
    partial = path.parent / f".{path.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


@contextmanager
def staged_folder(
    target: str | Path,
    *,
    kind: str,
    owns: Callable[[Path], bool],
    carry: tuple[str, ...] = (),
) -> Iterator[Path]:
    """Yield an empty hidden folder beside ``target`` to write into; when the block ends without
    an exception, write the marker and rename the folder to ``target``. An exception (or a kill)
    leaves ``target`` as it was and the staging folder removed (a kill: left hidden).

    An existing ``target`` is replaced only when ``owns(target)`` says it is a folder of this kind
    (never a folder of other files: ValueError before anything is written); the entries named in
    ``carry`` (e.g. a model's ``analysis``) move over from it unless the new folder has its own."""
    target = Path(target)
    check_replaceable(target, kind=kind, owns=owns)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_name(target)
    staging.mkdir()
    try:
        yield staging
        write_marker(staging, kind)
        _swap_in(staging, target, carry)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_replaceable(target: Path, *, kind: str, owns: Callable[[Path], bool]) -> None:
    """ValueError unless ``target`` is absent, empty, or a folder of ``kind`` (``owns``): what
    :func:`staged_folder` may replace (a command checks it before its long work, too)."""
    if target.exists() and not (target.is_dir() and (owns(target) or not any(target.iterdir()))):
        article = "an" if kind[0] in "aeiou" else "a"
        raise ValueError(
            f"{target} exists and is not {article} {kind} folder that attnscope wrote, so it is not replaced "
            "(choose a new or empty folder)"
        )


def _swap_in(staging: Path, target: Path, carry: tuple[str, ...]) -> None:
    """Two renames: the old folder aside, the new one in (between them no folder has the name,
    which readers treat as absent), then the old one deleted."""
    if not target.exists():
        os.rename(staging, target)
        return
    for name in carry:
        if (target / name).exists() and not (staging / name).exists():
            os.rename(target / name, staging / name)
    old = staging_name(target, "old")
    os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
