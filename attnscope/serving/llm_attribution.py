"""``POST /api/attribution`` for a decoder-only model (docs/llm.md, "Attribution"): its translation
(or the teacher-forced target) attributed to the source tokens of its prompt, and the contrastive
question "why this token here rather than that foil", through :mod:`attnscope.llm.attribution`.
Split from :mod:`attnscope.serving.llm_common`, whose helpers it uses."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi import HTTPException

from attnscope.attribution import normalise_rows, summary
from attnscope.engine.attribution_answer import (
    AttributionRequest,
    AttributionResponse,
    ContrastiveAttribution,
    ContrastRequest,
    Correlations,
)
from attnscope.engine.errors import InvalidInput
from attnscope.engine.llm_route_prices import price_llm_route
from attnscope.engine.schemas import TranslateRequest
from attnscope.engine.service import ModelService
from attnscope.llm.attribution import attribute_llm, contrast_llm
from attnscope.llm.common import rounded
from attnscope.llm.service import LLMRequestError, LLMService
from attnscope.llm.translator import LLMTranslation, LLMTranslator
from attnscope.serving.llm_common import checked_requests, http_error, request_price


async def attribution(
    service: ModelService, llm: LLMService, body: AttributionRequest, *, gone: threading.Event | None = None
) -> AttributionResponse:
    """``POST /api/attribution`` for a decoder-only model: its translation (greedy or beam, the
    common defaults) or ``body.target`` teacher-forced, attributed to the source tokens of its
    prompt (:func:`attnscope.llm.attribution.attribute_llm`), beside the ``cross`` kind of the
    same pass. ``contrast``: its foil text tokenised with the model's own tokenizer, one token or
    several (:func:`_foil`, :func:`_contrast`)."""
    translate_body = TranslateRequest.model_construct(model=body.model, text=body.text, beam_size=min(body.beam_size, 8),
                                                      max_length=None, attention=["cross"])  # fmt: skip
    translator, (request,) = checked_requests(llm, translate_body)
    if body.target is not None:
        request = replace(request, target=body.target)
    config, budget = translator.loaded.config, llm.budget.max_floats

    def translate_job() -> LLMTranslation:
        try:
            return llm.run(request)
        except LLMRequestError as err:
            raise http_error(err) from None

    # the translation (or the teacher-forced pass) first, in a slot of its own under its own price,
    # so that integrated gradients are priced on the real lengths before their job (issue 45)
    result: LLMTranslation = await service.run_alone(translate_job, gone=gone,
                                                     cost=request_price(service.settings, translator, [request]))  # fmt: skip
    p, target = result.prompt, result.target_ids
    if not target:
        raise InvalidInput(("body", "target"), "the translation is empty: nothing to attribute")
    foil = None if body.contrast is None else _foil(translator, target, body.contrast)
    longest = len(target) if body.contrast is None or foil is None else max(len(target), body.contrast.position + len(foil))
    floats = (body.steps + 1) * (len(p.ids) + longest) * config.vocab_size  # the logits of the path's batch
    if floats > budget:
        raise HTTPException(413, f"integrated gradients over {body.steps + 1} points keep {floats:,} logits, over the "
                                 f"limit of {budget:,}: ask for fewer steps")  # fmt: skip
    cost = price_llm_route(service.settings, "llm_attribution", config, len(p.ids), len(target), steps=body.steps)
    if body.contrast is not None and foil is not None:  # a second path, up to the position and the foil
        cost += price_llm_route(service.settings, "llm_attribution", config, len(p.ids),
                                body.contrast.position + len(foil), steps=body.steps)  # fmt: skip

    def job(should_stop: Callable[[], bool]) -> AttributionResponse:
        attr = attribute_llm(translator.loaded.model, p.ids, p.source_span, target, steps=body.steps,
                             should_stop=should_stop)  # fmt: skip
        cross = result.views.target_source if result.views is not None else None
        s = summary(attr, cross)
        return AttributionResponse(
            model=body.model, translation=result.text if body.target is None else body.target,
            source_tokens=p.tokens[p.source_span[0] : p.source_span[1]], target_tokens=result.target_tokens,
            input_x_gradient=[[round(v, 6) for v in row] for row in s["input_x_gradient"].tolist()],
            integrated_gradients=[[round(v, 6) for v in row] for row in s["integrated_gradients"].tolist()],
            cross_attention=None if cross is None else rounded(cross, 6).tolist(),
            correlation=None if s["correlation"] is None else Correlations(**s["correlation"]),
            completeness_gap=round(float(attr.completeness_gap.abs().max()), 6),
            contrastive=None if body.contrast is None or foil is None
            else _contrast(translator, p, target, body.contrast, foil, body.steps),
        )  # fmt: skip

    answer: AttributionResponse = await service.run_stoppable(job, gone=gone, cost=cost)
    return answer


def _foil(translator: LLMTranslator, target: list[int], asked: ContrastRequest) -> list[int]:
    """The foil's ids: ``asked.token`` tokenised alone by the model's tokenizer, one token or
    several (scored as a whole continuation, :func:`~attnscope.llm.attribution.contrast_llm`);
    422 on ``contrast`` for a position past the output, a foil that gives no token, or the one
    token the model wrote there."""
    if asked.position >= len(target):
        raise InvalidInput(("body", "contrast", "position"), f"is {asked.position}; the output has {len(target)} tokens")
    ids = translator.loaded.tokenizer.encode(asked.token)
    if not ids:
        raise InvalidInput(("body", "contrast", "token"), f"{asked.token!r} gives no token for this model: nothing to contrast")
    if ids == [target[asked.position]]:
        raise InvalidInput(("body", "contrast", "token"), "is the token the model wrote there: nothing to contrast")
    return list(ids)


def _contrast(
    translator: LLMTranslator, p: Any, target: list[int], asked: ContrastRequest, foil: list[int], steps: int
) -> ContrastiveAttribution:  # fmt: skip
    """Why the output has its token at ``asked.position`` rather than the ``foil`` ids (the text
    ``asked.token``, :func:`_foil`): ``difference`` is log p(token) − log p(foil), the foil's
    whole log-probability teacher-forced from the same prefix."""
    found = contrast_llm(translator.loaded.model, p.ids, p.source_span, target, position=asked.position,
                         foil=foil, steps=steps)  # fmt: skip
    ixg, ig = normalise_rows(found.input_x_gradient)[0], normalise_rows(found.integrated_gradients)[0]
    return ContrastiveAttribution(
        position=asked.position, token=translator.token_texts([target[asked.position]])[0], foil=asked.token,
        difference=round(float(found.f[0]), 6), input_x_gradient=[round(v, 6) for v in ixg.tolist()],
        integrated_gradients=[round(v, 6) for v in ig.tolist()],
        completeness_gap=round(float(found.completeness_gap.abs().max()), 6),
    )  # fmt: skip
