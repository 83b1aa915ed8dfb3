"""``attnscope seal FOLDER...``: check a folder written without a completion marker and add one.

A model, vision model or analysis folder written by attnscope carries ``complete.json``
(:mod:`attnscope.staging`); one written before that rule, or assembled by hand, does not, and
the loaders refuse it (it cannot be told from an interrupted write). Sealing loads it the way
the server would (every check: config against the weights' header, tokenizer, weights) and only
then writes the marker; a folder that fails is named with its error and left unsealed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from attnscope.staging import COMPLETE_FILE, write_marker

logger = logging.getLogger(__name__)


def seal(folder: Path) -> str:
    """Check ``folder`` by loading it, then write its marker; returns the kind sealed.
    ValueError/OSError naming the problem when it does not load."""
    from attnscope.repository import CONFIG_FILE, load_model_folder
    from attnscope.vision import folders as vision_folders

    if (folder / CONFIG_FILE).is_file():
        load_model_folder(folder, require_complete=False)
        kind = "model"
    elif (folder / vision_folders.CONFIG_FILE).is_file():
        vision_folders.load_folder(folder, require_complete=False)
        kind = "vision"
    elif (folder / "analysis.json").is_file() and (folder / "rows.parquet").is_file():
        kind = "analysis"
    else:
        raise ValueError(f"{folder} is not a model, vision model or analysis folder")
    write_marker(folder, kind)
    return kind


def add_command(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("seal", help=f"check folders written without a completion marker and add their {COMPLETE_FILE}")
    parser.add_argument("folders", nargs="+", type=Path, help="model, vision model or analysis folders")


def run(args: argparse.Namespace) -> int:
    failed = 0
    for folder in args.folders:
        try:
            kind = seal(folder)
        except (OSError, ValueError) as err:
            print(f"attnscope seal: error: {folder}: {err}", file=sys.stderr)  # noqa: T201 - the command's output
            failed += 1
            continue
        print(f"sealed {folder} ({kind})")  # noqa: T201 - the command's output
    return 1 if failed else 0
