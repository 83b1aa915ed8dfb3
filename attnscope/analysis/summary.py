"""The small per-head summary a model folder ships beside its weights (``analysis/heads.json``),
and how the server finds and reads it.

``attnscope analyze`` writes ``heads.json`` next to its Parquet: what was run (model, corpus by
file name, mode, sentences, throughput), the role rule's thresholds, and one entry per
kind × layer × head with its role and the means of its statistics (those that apply to its kind),
rounded to four decimals: ~20 kB for a 72-head model, ~4 kB gzipped. The quantiles stay in
``heads.parquet``. Copying it to ``models/<id>/analysis/heads.json`` (or to
``<analysis_dir>/<id>/heads.json``, the ``analysis_dir`` setting) shows the roles on the Models
page and in the explorer's head grid. Reading it needs neither pyarrow nor numpy."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SUMMARY_FILE = "heads.json"
FOLDER = "analysis"
DIGITS = 4
# What every head entry must have; the rest (statistics) is optional, null where it does not apply.
HEAD_KEYS: tuple[str, ...] = ("kind", "layer", "head", "role")
QUANTILE_SUFFIXES = (10, 50, 90)


class NoAnalysis(LookupError):
    """A model has no analysis summary (or an unreadable one); the message says where it looked."""


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, DIGITS)
    return value


def summary_document(meta: Mapping[str, Any], heads: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``heads.json``'s content from ``analysis.json``'s ``meta`` and the per-head summaries of
    :func:`attnscope.analysis.roles.summarize` (floats rounded, NaN as null, corpus paths by name)."""
    from attnscope.analysis import roles

    def name(value: Any) -> Any:
        return Path(str(value)).name if value else value

    return {
        "model": name(meta.get("model")),
        "corpus": name(meta.get("corpus")),
        "references": name(meta.get("references")),
        "alignments": name(meta.get("alignments")),
        "mode": meta.get("mode"),
        "limit": meta.get("limit"),
        "sentences": meta.get("sentences"),
        "sentences_per_second": meta.get("sentences_per_second"),
        "rules": {"sink": roles.SINK, "positional": roles.POSITIONAL, "alignment": roles.ALIGNMENT, "rare": roles.RARE},
        "heads": [_head(head) for head in heads],
    }


def _head(head: Mapping[str, Any]) -> dict[str, Any]:
    """A head's entry: its role and the means of its statistics, rounded; quantiles (in
    heads.parquet), the per-head sentence count and statistics that do not apply are left out."""
    out = {}
    for key, value in head.items():
        value = _round(value)
        if value is None or key == "sentences" or any(key.endswith(f"_q{q}") for q in QUANTILE_SUFFIXES):
            continue
        out[key] = value
    return out


def write_summary(path: Path, document: Mapping[str, Any]) -> int:
    """Write ``document`` compactly (one head a line, for readable diffs); returns the bytes written."""
    heads = document.get("heads", [])
    rest = {k: v for k, v in document.items() if k != "heads"}
    lines = ",\n".join(json.dumps(h, separators=(",", ":")) for h in heads)
    text = json.dumps(rest, indent=1)[:-2] + ',\n "heads": [\n' + lines + "\n ]\n}\n"
    from attnscope.staging import write_text_atomic

    write_text_atomic(path, text)  # a reader (the server) never sees half of it
    return len(text.encode("utf-8"))


def summary_path(model_folder: Path, analysis_dir: Path | None = None) -> Path:
    """Where a model's summary lives: ``<analysis_dir>/<model id>/heads.json`` when the setting
    is given, else ``<model folder>/analysis/heads.json``."""
    if analysis_dir is not None:
        return analysis_dir / model_folder.name / SUMMARY_FILE
    return model_folder / FOLDER / SUMMARY_FILE


def read_summary(path: Path) -> dict[str, Any]:
    """The summary at ``path``; NoAnalysis naming the file when it is missing or malformed."""
    if not path.is_file():
        raise NoAnalysis(f"no head analysis at {path.parent.name}/{path.name}: run `attnscope analyze` and copy its {SUMMARY_FILE} there")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise NoAnalysis(f"{path.parent.name}/{path.name} is not readable JSON: {err}") from err
    heads = document.get("heads") if isinstance(document, dict) else None
    if not isinstance(heads, list) or not all(isinstance(h, dict) and all(k in h for k in HEAD_KEYS) for h in heads):
        raise NoAnalysis(f"{path.parent.name}/{path.name} has no list of heads with {', '.join(HEAD_KEYS)}")
    return document


def check_shape(document: Mapping[str, Any], shapes: Mapping[str, tuple[int, int]], name: str) -> None:
    """NoAnalysis unless ``document``'s heads are exactly the model's: every (kind, layer, head)
    of ``shapes`` (kind -> (layers, heads), the model's geometry) once, and nothing else (a
    heads.json copied from another model would label heads that are not there, or miss some)."""
    want = {(k, layer, head) for k, (layers, heads) in shapes.items() for layer in range(layers) for head in range(heads)}
    got = [(h.get("kind"), h.get("layer"), h.get("head")) for h in document.get("heads", [])]
    if set(got) != want or len(got) != len(want):
        counts = ", ".join(f"{k} {layers}×{heads}" for k, (layers, heads) in shapes.items()) or "no attention"
        raise NoAnalysis(
            f"{name} does not fit this model: it describes {len(got)} head(s), the model has {len(want)} "
            f"({counts}); it was written for another model — run `attnscope analyze` on this one"
        )
