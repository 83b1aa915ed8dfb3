"""Each answer built once, from the decoder's output and what its request asked for.

A batch's runner hands :func:`answer_batch` the decode to run; every field of an answer is
computed from the :class:`~attnscope.translator.Translation` (the decoder's output with its
attention) and the ticket's :class:`~attnscope.engine.request.Job` by the module that owns it (the
tokens and attention: ``answers``; the explorer's extras: ``explain``; the word alignment:
``ablation``; protected spans: here), then the answer is constructed once, with the batch's
time. Nothing patches an answer after that."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from attnscope.decoding.confidence import confidence_of
from attnscope.engine.ablation import word_alignment
from attnscope.engine.answers import response_fields
from attnscope.engine.attention_store import on_demand_fields
from attnscope.engine.batching import Ticket
from attnscope.engine.explain import extra_fields
from attnscope.engine.heads import HeadRef
from attnscope.engine.registry import ServedModel
from attnscope.engine.request import Job
from attnscope.engine.schemas import Confidence, MissingWord, ProtectedSpan, TranslationResponse
from attnscope.nn.ablation import HeadTuple, disabled_heads
from attnscope.text.missing import missing_words
from attnscope.text.protect import Placement
from attnscope.translator import Translation

# A batch's decode: its translations in ticket order and, under protect, where each one's
# protected spans went (None otherwise).
Decode = Callable[[], tuple[list[Translation], list[list[Placement]] | None]]


def answer_batch(
    served: ServedModel, tickets: list[Ticket], run: Decode, disabled: tuple[HeadTuple, ...] = ()
) -> list[list[TranslationResponse]]:
    """Run the decode of every ticket's texts (one batch) and build each ticket's answers with its
    job's options; ``timing_ms`` is the whole batch's time. The ``disabled`` heads stay off for
    the decode *and* the extras' second pass (scores, alternatives), so both describe the same
    model."""
    echoed = [HeadRef(kind=k, layer=la, head=h) for k, la, h in disabled]  # type: ignore[arg-type]
    started = time.perf_counter()
    with torch.inference_mode(), disabled_heads(served.loaded.model, list(disabled)):
        results, placed = run()
        found = iter(results)
        spans = None if placed is None else iter(placed)
        parts = [_ticket_fields(served, ticket.payload, len(ticket.texts), found, spans) for ticket in tickets]
    elapsed = round((time.perf_counter() - started) * 1000.0, 3)
    return [
        [TranslationResponse.model_construct(**fields, disabled_heads=echoed, timing_ms=elapsed) for fields in group]
        for group in parts
    ]


def _ticket_fields(
    served: ServedModel,
    job: Job,
    count: int,
    results: Iterator[Translation],
    spans: Iterator[list[Placement]] | None,
) -> list[dict[str, Any]]:
    """The fields of one ticket's ``count`` answers, from the next results of the batch."""
    group = []
    for _ in range(count):
        result = next(results)
        group.append(answer_fields(served, job, result, None if spans is None else next(spans)))
    return group


def answer_fields(
    served: ServedModel, job: Job, result: Translation, placements: list[Placement] | None = None
) -> dict[str, Any]:
    """Every field of one answer but ``disabled_heads`` and ``timing_ms`` (the batch's)."""
    loaded, options = served.loaded, job.answer
    fields = response_fields(loaded, result, kinds=options.kinds, decimals=options.decimals)
    fields.update(extra_fields(loaded, result, job.extras, options.decimals))
    if options.on_demand and job.store is not None:
        fields.update(on_demand_fields(job.store, loaded.id, result, job.request.disable_heads))
    target = result.text if job.request.target is None else job.request.target
    fields["word_alignment"] = word_alignment(served, result, job.choice, result.source_text, target)
    if placements is not None:
        fields["protected"] = protected_spans(placements)
    fields["rescored"] = bool(placements)
    if job.request.target is None:  # the model's own output: what it dropped, how sure it was
        spans = [(p.source_start, p.source_end) for p in placements or []]
        missing = missing_words(result.source_text, result.text, spans)
        fields["missing_words"] = [MissingWord.model_construct(None, **w) for w in missing]
        confidence = confidence_of([float(x) for x in result.hypothesis.token_logprobs], loaded.card)
        fields["confidence"] = Confidence.model_construct(**confidence)
    return fields


def protected_spans(placements: list[Placement]) -> list[ProtectedSpan]:
    """Where each protected span of a text went (``Translator.translate_protected``)."""
    return [
        ProtectedSpan(
            text=p.text, kind=p.kind, placed=p.how,  # type: ignore[arg-type]
            source_start=p.source_start, source_end=p.source_end,
            target_start=p.target_start, target_end=p.target_end,
        )  # fmt: skip
        for p in placements
    ]
