"""``attnscope analyze``: its arguments and the call into :mod:`attnscope.analysis.runner`.

    attnscope analyze models/en-de-transformer --corpus train.en.gz --out analysis/en-de --limit 500
    attnscope analyze MODEL --corpus src.txt --references ref.txt --alignments links.txt --out DIR
    attnscope analyze MODEL --corpus src.txt --out DIR --ray                   # local Ray
    attnscope analyze MODEL --corpus src.txt --out DIR --ray ray://head:10001  # a cluster
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_command(sub: Any) -> None:
    """Add ``analyze`` to the ``attnscope`` parser's subparsers."""
    an = sub.add_parser("analyze", help="statistics and roles of every attention head over a corpus (Parquet)")
    an.add_argument("model", help="a model folder, or a model's id")
    an.add_argument("--corpus", required=True, help="source sentences, one a line (plain or gzipped)")
    an.add_argument("--out", required=True, help="folder for rows.parquet, heads.parquet, analysis.json")
    an.add_argument("--references", default=None,
                    help="reference translations, one a line: teacher-forced on them (default: greedy translations)")
    an.add_argument("--alignments", default=None,
                    help="Pharaoh links (source word-reference word, Moses words) or align-corpus lines, "
                         "one a line: alignment F1 of each cross-attention head (needs --references)")
    an.add_argument("--limit", type=int, default=None, help="only the first N lines")
    an.add_argument("--batch-size", type=int, default=32)
    an.add_argument("--device", default=None, help="cpu, cuda ... (default: cuda if available)")
    an.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="run as a Ray Data pipeline: a local Ray without ADDRESS, else that cluster "
                         "(needs attnscope[ray])")
    an.add_argument("--actors", type=int, default=1, help="with --ray: model-holding actors (default 1)")
    an.add_argument("--threads", type=int, default=None,
                    help="torch threads in-process, or per actor with --ray (default: torch's choice; 1 per actor)")
    an.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from attnscope.analysis.runner import AnalyzeOptions, analyze

    def path(value: str | None) -> Path | None:
        return None if value is None else Path(value)

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be positive, got {args.limit}")
    options = AnalyzeOptions(
        model=Path(args.model), corpus=Path(args.corpus), out=Path(args.out),
        references=path(args.references), alignments=path(args.alignments), limit=args.limit,
        batch_size=args.batch_size, device=args.device, ray=args.ray, actors=args.actors, threads=args.threads,
        progress=not args.quiet,
    )  # fmt: skip
    result = analyze(options)  # a missing extra: one line from attnscope.cli.main
    print(json.dumps({k: v for k, v in result.items() if k != "roles"}, indent=1))  # noqa: T201 - the command's output
    return 0
