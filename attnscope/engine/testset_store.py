"""Finished test-set jobs on disk: one folder per job, ``<results>/<id>/`` with ``rows.parquet``
(the table), ``job.json`` (what the job was) and ``complete.json`` (:mod:`attnscope.staging`: the
folder is written under a hidden name and renamed into place only when complete).

A server finds every complete folder again at start-up; a folder without its marker (a write
interrupted by a kill or a full disk, or files copied half-way) is skipped with a warning, never
shown as a result, and hidden staging folders are never looked at.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnscope.staging import COMPLETE_FILE, IncompleteFolder, read_marker, staged_folder

logger = logging.getLogger(__name__)

KIND = "testset"
ROWS_FILE, META_FILE = "rows.parquet", "job.json"
JOB_ID = re.compile(r"^[0-9a-f]{12}$")


def _owns(folder: Path) -> bool:
    return (folder / COMPLETE_FILE).is_file() and (folder / META_FILE).is_file()


def save(results: Path, job_id: str, rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Write a finished job's folder whole (or not at all); its path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = results / job_id
    with staged_folder(target, kind=KIND, owns=_owns) as staging:
        table = (
            pa.Table.from_pylist(list(rows))
            if rows
            else pa.table({"index": pa.array([], pa.int64())})
        )
        pq.write_table(table, staging / ROWS_FILE)
        (staging / META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return target


def read_rows(folder: Path) -> list[dict[str, Any]]:
    """A job folder's table (IncompleteFolder if it lost its marker since)."""
    import pyarrow.parquet as pq

    read_marker(folder, KIND)
    return pq.read_table(folder / ROWS_FILE).to_pylist()


def load_all(results: Path) -> list[tuple[dict[str, Any], Path]]:
    """(job.json, folder) of every complete job folder under ``results``."""
    if not results.is_dir():
        return []
    found = []
    for folder in sorted(results.iterdir()):
        if not folder.is_dir() or not JOB_ID.match(folder.name):
            continue  # hidden staging folders, other files
        try:
            read_marker(folder, KIND)
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        except (IncompleteFolder, OSError, ValueError) as err:
            logger.warning("test-set results %s skipped: %s", folder, err)
            continue
        if isinstance(meta, dict) and meta.get("id") == folder.name:
            found.append((meta, folder))
    return found
