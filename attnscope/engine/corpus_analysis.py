"""Per-head statistics and roles over a handful of sentences, on the service: the request and
answer of ``POST /api/analyze`` and the job behind it, shared by the route and the in-process
API (``attnscope.load(...).analyze``).

The numbers are ``attnscope analyze``'s: the same items (:func:`attnscope.analysis.corpus.make_items`),
cut into the same batches of :data:`BATCH`, through the same row function
(:func:`attnscope.analysis.runner.analyze_chunk`) and summary (:func:`attnscope.analysis.roles.summarize`).
A corpus bigger than :data:`MAX_SENTENCES` is a job for the command (and Ray), not a request."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from attnscope.analysis import roles
from attnscope.analysis.corpus import Item, batches, make_items
from attnscope.analysis.llm_rows import output_budget
from attnscope.analysis.rows import INT_COLUMNS
from attnscope.analysis.runner import analyze_chunk, concat
from attnscope.engine import limits
from attnscope.engine.errors import InvalidInput
from attnscope.engine.limits import Cost
from attnscope.engine.llm_route_prices import price_llm_route
from attnscope.engine.registry import ServedModel
from attnscope.engine.schemas import ModelId, StrictRequest, Target, Text
from attnscope.engine.service import ModelService
from attnscope.llm.translator import LLMTranslator

__all__ = ["AnalyzeRequest", "AnalyzeResponse", "analyze_answer", "analyze_llm_answer", "BATCH", "MAX_SENTENCES"]

MAX_SENTENCES = 256
BATCH = 32  # attnscope analyze's default --batch-size: the same batch mates, the same padding


class AnalyzeRequest(StrictRequest):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"model": "en-de-transformer", "sentences": ["A dog runs.", "Two men play in the snow."]}]}
    )

    model: ModelId
    sentences: list[Text] = Field(min_length=1, max_length=MAX_SENTENCES, description="Source sentences.")
    references: list[Target] | None = Field(
        default=None, description="One reference translation per sentence: teacher-forced on them (default: greedy translations)."
    )
    alignments: list[Annotated[str, Field(max_length=10_000)]] | None = Field(
        default=None,
        description="Pharaoh links per sentence (source word-reference word, 0-based Moses words): each cross head's "
        "alignment F1 (needs references).",
    )
    rows: bool = Field(default=True, description="Also return every sentence × head row (the command's rows.parquet).")


class AnalyzeResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    mode: str = Field(description="teacher-forced (with references) or greedy.")
    sentences: int = Field(description="Sentences analysed (empty or over-long ones are skipped).")
    skipped: list[int] = Field(description="Indices of the sentences skipped.")
    rules: dict[str, float] = Field(description="The role rule's thresholds (docs/analysis.md).")
    heads: list[dict[str, Any]] = Field(
        description="One per kind × layer × head, sorted: role, role_score, alignment_f1, sentences, and each "
        "statistic's `_mean`, `_q10`, `_q50`, `_q90` (null where it does not apply): heads.parquet's rows."
    )
    rows: dict[str, list[Any]] | None = Field(
        description="Columns of one row per sentence × kind × layer × head (rows.parquet's; null where a statistic "
        "does not apply); `sentence` is the index into `sentences`."
    )


async def analyze_answer(service: ModelService, body: AnalyzeRequest, *, gone: threading.Event | None = None) -> dict[str, Any]:
    """The answer to ``body`` (an :class:`AnalyzeResponse`'s JSON): each batch runs in a decode
    slot of its own, so the queue bound and the deadline apply per batch, as to a translation."""
    async with service.holding(body.model) as served:
        items = _items(service, served, body)
        rows = await _rows(service, items, lambda chunk: analyze_chunk(served.translator, chunk), gone=gone)
    return _answer(body, served.loaded.id, items, rows)


async def analyze_llm_answer(
    service: ModelService, translator: LLMTranslator, body: AnalyzeRequest, *, gone: threading.Event | None = None
) -> dict[str, Any]:  # fmt: skip
    """:func:`analyze_answer` for a decoder-only model (:mod:`attnscope.analysis.llm_rows`): the
    same checks and answer; each batch is priced as the translations it runs (its prompts and
    outputs at their bound), so a batch too big for the limits is a 422 before it runs."""
    _check_lists(body)
    loaded = translator.loaded
    config = loaded.config
    prompts = []
    for k, text in enumerate(body.sentences):
        try:
            prompts.append(translator.prompt(text))
        except ValueError as err:  # PromptError: empty, or over the prompt limit
            raise InvalidInput(("body", "sentences", k), str(err)) from None
        if len(prompts[-1].ids) >= config.max_positions:
            raise InvalidInput(("body", "sentences", k), f"its prompt has {len(prompts[-1].ids)} tokens; the model "
                               f"has {config.max_positions} positions")  # fmt: skip
    items = _made(loaded.tokenizer, body, (loaded.source_lang, loaded.target_lang))
    prices = {}
    for item in items:
        prompt = len(prompts[item.line].ids)
        if item.reference is not None:
            target = len(loaded.tokenizer.encode(item.reference)) + 1
            if prompt + target - 1 > config.max_positions:
                raise InvalidInput(("body", "references", item.line), f"the prompt and this reference take "
                                   f"{prompt + target - 1} positions; the model has {config.max_positions}")  # fmt: skip
        else:
            target = output_budget(translator, prompt)
        prices[item.line] = price_llm_route(service.settings, "llm_translation", config, prompt, target)

    def price(chunk: list[Item]) -> Cost:
        return sum((prices[item.line] for item in chunk), Cost())

    def work(chunk: list[Item]) -> dict[str, np.ndarray]:
        try:
            return analyze_chunk(translator, chunk)
        except ValueError as err:  # a sentence the model cannot take after all: named, not a 500
            raise InvalidInput(("body", "sentences"), str(err)) from None

    rows = await _rows(service, items, work, gone=gone, price=price)
    return _answer(body, loaded.id, items, rows)


async def _rows(
    service: ModelService, items: list[Item], work: Callable[[list[Item]], dict[str, np.ndarray]], *,
    gone: threading.Event | None, price: Callable[[list[Item]], Cost] | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """The rows of ``items``, batch after batch, each batch under its ``price`` (none: free)."""
    columns: list[dict[str, np.ndarray]] = []
    for chunk in batches(items, BATCH):
        cost = price(chunk) if price is not None else Cost()
        columns.append(await service.run_alone(functools.partial(work, chunk), gone=gone, cost=cost))
    return concat(columns)


def _answer(body: AnalyzeRequest, model_id: str, items: list[Item], rows: dict[str, np.ndarray]) -> dict[str, Any]:
    kept = {item.line for item in items}
    return {
        "model": model_id,
        "mode": "teacher-forced" if body.references is not None else "greedy",
        "sentences": len(items),
        "skipped": [k for k in range(len(body.sentences)) if k not in kept],
        "rules": {"sink": roles.SINK, "positional": roles.POSITIONAL, "alignment": roles.ALIGNMENT, "rare": roles.RARE},
        "heads": [{k: _plain(v) for k, v in head.items()} for head in roles.summarize(rows)],
        "rows": _columns(rows) if body.rows else None,
    }


def _check_lists(body: AnalyzeRequest) -> None:
    """422 naming the field for lists of different lengths, or links without references."""
    n = len(body.sentences)
    for name, given in (("references", body.references), ("alignments", body.alignments)):
        if given is not None and len(given) != n:
            raise InvalidInput(("body", name), f"has {len(given)} lines but sentences has {n}")
    if body.alignments is not None and body.references is None:
        raise InvalidInput(("body", "alignments"), "needs references: the links point at the reference's words")


def _items(service: ModelService, served: ServedModel, body: AnalyzeRequest) -> list[Item]:
    """The request's sentences as analysis items; a 422 naming the field for a sentence over the
    limits, lists of different lengths, links without references or a malformed links line."""
    _check_lists(body)
    if not served.loaded.config.attention_kinds:
        raise InvalidInput(("body", "model"), f"{served.loaded.id} has no attention to analyse")
    for k, text in enumerate(body.sentences):
        limits.check_text(service.settings, served, text, ("body", "sentences", k))
    for k, text in enumerate(body.references or []):
        limits.check_text(service.settings, served, text, ("body", "references", k))
    loaded = served.loaded
    return _made(loaded.tokenizer, body, (loaded.source_lang, loaded.target_lang))


def _made(tokenizer: Any, body: AnalyzeRequest, langs: tuple[str, str]) -> list[Item]:
    try:
        items = make_items(tokenizer, body.sentences, references=body.references, links=body.alignments,
                           langs=langs, where="alignments")  # fmt: skip
    except ValueError as err:
        raise InvalidInput(("body", "alignments"), str(err)) from None
    if not items:
        raise InvalidInput(("body", "sentences"), "has no sentence to analyse (every one is empty or over-long)")
    return items


def _plain(value: Any) -> Any:
    """A summary value as JSON: NaN as null, numpy numbers as Python ones."""
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and np.isnan(value) else value


def _columns(rows: dict[str, np.ndarray]) -> dict[str, list[Any]]:
    """The rows' numpy columns (``-1``/NaN for absent) as JSON lists with nulls; floats are the
    float32 values rows.parquet stores, written as Python floats."""
    out: dict[str, list[Any]] = {}
    for name, values in rows.items():
        if name == "kind":
            out[name] = [str(v) for v in values]
        elif name in INT_COLUMNS:
            out[name] = [None if v < 0 else int(v) for v in values.tolist()]
        else:
            out[name] = [None if np.isnan(v) else float(v) for v in values.tolist()]
    return out
