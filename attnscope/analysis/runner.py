"""``attnscope analyze``: the whole run, in-process or on Ray actors (one executor for both,
:func:`attnscope.executor.run_batches`: a batch of sentences is one unit of work), and the files
it writes.

Under the output folder:

- ``rows.parquet``: one row per sentence × kind × layer × head (:data:`attnscope.analysis.rows.COLUMNS`),
  sorted by sentence, kind, layer, head; null where a statistic does not apply.
- ``heads.parquet``: one row per kind × layer × head (:func:`attnscope.analysis.roles.summarize`).
- ``analysis.json``: what was run (model, corpus, mode, counts) and how fast, plus the roles.
- ``heads.json``: the per-head summary a model folder can ship (:mod:`attnscope.analysis.summary`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnscope.analysis.corpus import Item, batches, read_items
from attnscope.analysis.llm_rows import analyze_llm_batch
from attnscope.analysis.roles import summarize
from attnscope.analysis.rows import INT_COLUMNS, analyze_batch, to_numpy
from attnscope.analysis.summary import SUMMARY_FILE, summary_document, write_summary
from attnscope.executor import Runner, run_batches
from attnscope.extras import require
from attnscope.llm.folder import is_llm_folder, llm_folder_tokenizer
from attnscope.llm.translator import LLMTranslator
from attnscope.staging import check_replaceable, staged_folder
from attnscope.translator import Translator

logger = logging.getLogger(__name__)

ROWS_FILE = "rows.parquet"
HEADS_FILE = "heads.parquet"
META_FILE = "analysis.json"
SORT_KEYS = ("sentence", "kind", "layer", "head")


@dataclass(frozen=True)
class AnalyzeOptions:
    """One ``attnscope analyze`` run. ``ray`` is None for in-process, ``""`` for a local Ray,
    else a Ray address; ``actors`` is how many model-holding actors Ray runs; ``threads`` the
    torch threads of the process (in-process) or of each actor (default: torch's own choice
    in-process, 1 per actor). Floats agree to the last bit only at equal thread counts: a
    reduction split over more threads adds in another order."""

    model: Path
    corpus: Path
    out: Path
    references: Path | None = None
    alignments: Path | None = None
    limit: int | None = None
    batch_size: int = 32
    device: str | None = None
    ray: str | None = None
    actors: int = 1
    threads: int | None = None
    progress: bool = True


def _pyarrow() -> Any:
    require("pyarrow.parquet", "analysis", purpose="attnscope analyze (it writes Parquet)")  # the writers' submodule
    return require("pyarrow", "analysis")


def concat(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Numpy column batches -> one set of columns sorted by :data:`SORT_KEYS`."""
    if not parts:
        raise ValueError("no sentences to analyse")
    columns = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    order = np.lexsort([columns[k].astype(str) if k == "kind" else columns[k] for k in reversed(SORT_KEYS)])
    return {name: values[order] for name, values in columns.items()}


def rows_table(columns: dict[str, np.ndarray]) -> Any:
    """Numpy columns (``-1``/NaN for absent values) -> a pyarrow Table with nulls."""
    pa = _pyarrow()
    arrays = {}
    for name, values in columns.items():
        if name == "kind":
            arrays[name] = pa.array(values.astype(str).tolist(), type=pa.string())
        elif name in INT_COLUMNS:
            arrays[name] = pa.array(values, type=pa.int32(), mask=values < 0)
        else:
            arrays[name] = pa.array(values, type=pa.float32(), mask=np.isnan(values))
    return pa.table(arrays)


def analyze_chunk(translator: Translator | LLMTranslator, chunk: Sequence[Item]) -> dict[str, np.ndarray]:
    """One batch of sentences -> its analysis rows as numpy columns (the executor's unit of work);
    a decoder-only model's through :mod:`attnscope.analysis.llm_rows`."""
    if isinstance(translator, LLMTranslator):
        return to_numpy(analyze_llm_batch(translator, chunk))
    return to_numpy(analyze_batch(translator, chunk))


def run(options: AnalyzeOptions, items: Sequence[Item]) -> dict[str, np.ndarray]:
    """Every batch of ``items`` through the model, in-process or on Ray (``options.ray``), sorted."""
    if options.ray is not None and options.actors < 1:
        raise ValueError(f"--actors must be positive, got {options.actors}")
    runner = Runner(
        options.model, device=options.device, ray=options.ray, actors=options.actors, threads=options.threads,
        progress=options.progress,
    )  # fmt: skip
    chunks = list(batches(items, options.batch_size))
    return concat(run_batches(runner, analyze_chunk, chunks, desc=f"analyze {options.model.name}"))


def analyze(options: AnalyzeOptions) -> dict[str, Any]:
    """Run the analysis and write its files under ``options.out``; returns analysis.json's content."""
    pa = _pyarrow()
    from attnscope.repository import read_config
    from attnscope.text.tokenizer import Tokenizer

    check_replaceable(options.out, kind="analysis", owns=_is_analysis)  # before the long run, not after
    tokenizer: Any
    if is_llm_folder(options.model):
        tokenizer, langs = llm_folder_tokenizer(options.model)
    else:
        config, meta = read_config(options.model)
        if not config.attention_kinds:
            raise ValueError(f"{options.model} has no attention to analyse")
        langs = (str(meta.get("source_lang", "en")), str(meta.get("target_lang", "de")))
        tokenizer = Tokenizer.load(options.model / "tokenizer.model")
    items = read_items(
        tokenizer, options.corpus, references=options.references, alignments=options.alignments,
        langs=langs, limit=options.limit,
    )  # fmt: skip
    if not items:
        raise ValueError(f"{options.corpus} has no sentences to analyse")
    start = time.perf_counter()
    columns = run(options, items)
    seconds = time.perf_counter() - start
    heads = summarize(columns)
    result = {
        "model": str(options.model),
        "corpus": str(options.corpus),
        "references": str(options.references) if options.references else None,
        "limit": options.limit,
        "mode": "teacher-forced" if options.references else "greedy",
        "alignments": str(options.alignments) if options.alignments else None,
        "runner": "in-process" if options.ray is None else f"ray {options.ray or 'local'}",
        "sentences": len(items),
        "rows": int(len(columns["sentence"])),
        "seconds": round(seconds, 2),
        "sentences_per_second": round(len(items) / seconds, 2) if seconds else None,
        "roles": {f"{h['kind']} {h['layer']}.{h['head']}": h["role"] for h in heads},
    }
    # every file under a temporary name, then a marker and one rename: a run killed half-way
    # leaves the previous run's folder whole (never a new rows.parquet beside old files)
    with staged_folder(options.out, kind="analysis", owns=_is_analysis) as staged:
        pa.parquet.write_table(rows_table(columns), staged / ROWS_FILE)
        pa.parquet.write_table(pa.Table.from_pylist(heads), staged / HEADS_FILE)
        (staged / META_FILE).write_text(json.dumps(result, indent=1) + "\n")
        write_summary(staged / SUMMARY_FILE, summary_document(result, heads))
    logger.info("analysed %d sentences in %.1f s (%.1f sentences/s) -> %s",
                len(items), seconds, result["sentences_per_second"] or 0.0, options.out)  # fmt: skip
    return result


def _is_analysis(folder: Path) -> bool:
    """An earlier ``analyze`` output (its analysis.json), which a new run may replace."""
    return (folder / META_FILE).is_file()
