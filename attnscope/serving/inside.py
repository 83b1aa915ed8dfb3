"""``POST /api/lens`` (the logit lens and direct logit attribution) and ``POST /api/patch``
(activation patching between a clean and a corrupted source) for Transformer models and, by the
same routes, for the decoder-only LLM translators (a model id of ``/api/llm/models``: read on the
tokens written after the prompt); the computation is :mod:`attnscope.inside`. See docs/inside.md."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from attnscope.config import Settings
from attnscope.engine import limits, llm_route_prices, metrics, route_prices
from attnscope.engine.errors import InvalidInput
from attnscope.engine.limits import Cost
from attnscope.engine.registry import ServedModel
from attnscope.engine.schemas import BeamSize, ErrorResponse, ModelId, Target, Text
from attnscope.inside import decoder_only as llm_inside
from attnscope.inside.lens import DirectAttribution, inspect
from attnscope.inside.patching import patch
from attnscope.inside.recurrent import is_rnn, patch_context
from attnscope.inside.trace import NotApplicable, require_transformer
from attnscope.llm.prompt import PromptError
from attnscope.llm.search import LLMOptions
from attnscope.llm.translator import LLMTranslator, Prompt
from attnscope.nn.transformer import Transformer
from attnscope.serving.deps import ServiceDep
from attnscope.serving.disconnect import watch_disconnect
from attnscope.translator import Translation

router = APIRouter(prefix="/api", tags=["inside"])
ERRORS: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse}, 422: {"model": ErrorResponse}}


def _r(values: list, digits: int = 5) -> list:
    """Nested lists of floats rounded for the wire."""
    return [_r(v, digits) if isinstance(v, list) else round(float(v), digits) for v in values]


class LensRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True,
        json_schema_extra={"examples": [{"model": "en-de-transformer", "text": "A man is riding a bicycle."}]},
    )

    model: ModelId
    text: Text = Field(description="Source text.")
    target: Target | None = Field(default=None, description="Read this target (teacher-forced); default: the translation.")
    beam_size: BeamSize = 5
    k: Annotated[int, Field(ge=1, le=20, description="How many top tokens per point and position.")] = 5


class Attribution(BaseModel):
    norm: str = Field(description="How the final norm was made linear (its scale frozen on this pass).")
    logit: list[float] = Field(description="[target] the written word's logit: the sum of every part below.")
    self_heads: list[list[list[float]]] = Field(description="[layer][head][target] decoder self-attention heads.")
    cross_heads: list[list[list[float]]] = Field(description="[layer][head][target] cross-attention heads.")
    self_bias: list[list[float]] = Field(description="[layer][target] the self-attention output bias.")
    cross_bias: list[list[float]] = Field(description="[layer][target] the cross-attention output bias.")
    feed_forward: list[list[float]] = Field(description="[layer][target] the feed-forward blocks.")
    embeddings: list[float] = Field(description="[target] token embeddings plus positions.")
    final_bias: list[float] = Field(description="[target] the final norm's bias (and the output bias, if any).")
    norm_bias: list[list[float]] | None = Field(
        default=None, description="[layer][target] post-norm models: the β of each layer's sublayer norms, carried "
        "up through the later frozen norms (null: pre-norm).")


class LensResponse(BaseModel):
    model: str
    translation: str
    source_tokens: list[str]
    target_tokens: list[str]
    points: list[str] = Field(description='The residual stream\'s points: "embed", then "<layer>.self|cross|ff".')
    top_tokens: list[list[list[str]]] = Field(description="[point][target][k] the lens's top tokens.")
    top_probs: list[list[list[float]]] = Field(description="[point][target][k] their probabilities.")
    rank: list[list[int]] = Field(description="[point][target] the written word's rank (0: top-1).")
    prob: list[list[float]] = Field(description="[point][target] the written word's probability.")
    emergence: list[str | None] = Field(description="[target] the first point from which the word is top-1 and stays.")
    attribution: Attribution | None = Field(description="Direct logit attribution (docs/inside.md).")


class PatchRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True,
        json_schema_extra={"examples": [
            {"model": "en-de-transformer", "clean": "The man is reading.", "corrupted": "The woman is reading."}
        ]},
    )

    model: ModelId
    clean: Text = Field(description="The clean source; the target is its translation unless given.")
    corrupted: Text = Field(description="The corrupted source: the same number of tokens.")
    target: Target | None = Field(default=None, description="The target (teacher-forced); default: the clean translation.")
    beam_size: BeamSize = 5
    position: Annotated[int | None, Field(ge=0, description="One target position; default: sum over all.")] = None


class PatchResponse(BaseModel):
    model: str
    translation: str
    clean_tokens: list[str]
    corrupted_tokens: list[str]
    target_tokens: list[str]
    position: int | None
    self_heads: list[list[float]] = Field(description="[layer][head] Δ log p(target) patching a self-attention head.")
    cross_heads: list[list[float]] = Field(description="[layer][head] Δ log p(target) patching a cross-attention head.")
    position_rows: list[str] = Field(description='Rows of `positions`: "embed", then "enc <layer>".')
    positions: list[list[float]] = Field(description="[row][source] Δ patching the encoder residual at one position.")
    clean_log_prob: list[float] = Field(description="[target] log p of each target token with the clean source.")
    corrupted_log_prob: list[float] = Field(description="[target] the same with the corrupted source.")
    total_effect: float = Field(description="Δ of the whole corrupted source (the grids' scale).")
    source_span: list[int] | None = Field(
        default=None, description="LLM translators: the source's [start, end) among `clean_tokens`, the whole "
        "prompt (`positions` has a column per prompt token); null for encoder-decoders.")
    context_steps: list[float] | None = Field(
        default=None, description="RNN models: [step] Δ log p(target) patching that decoder step's attention context "
        "vector from the corrupted run (the head and position grids are empty: an RNN has neither).")
    context_grid: list[list[float]] | None = Field(
        default=None, description="RNN models: [patched step][target token] the Δ on each token (0 before the step).")


def _admit(settings: Settings, cost: int, what: str) -> None:
    """422 when ``cost`` (passes × positions) is over ATTNSCOPE_MAX_ATTRIBUTION_COST."""
    limit = settings.max_attribution_cost
    if cost > limit:
        metrics.REJECTED.labels("cost").inc()
        raise InvalidInput(("body",), f"this {what} would cost {cost:,}; the limit is {limit:,} "
                           "(ATTNSCOPE_MAX_ATTRIBUTION_COST): ask for a shorter text or target", kind="cost_limit")


def _model(served: ServedModel) -> Transformer:
    """The served model as a Transformer; 422 naming why the grids need one (an RNN)."""
    try:
        return require_transformer(served.loaded.model, served.loaded.id)
    except NotApplicable as exc:
        raise InvalidInput(("body", "model"), str(exc)) from None


def _attribution(d: DirectAttribution) -> Attribution:
    """The wire form; a decoder-only model has no cross-attention (empty lists)."""
    cross = d.heads.get("cross")
    return Attribution(
        norm=d.norm, logit=_r(d.logit.tolist()), self_heads=_r(d.heads["self"].tolist()),
        cross_heads=[] if cross is None else _r(cross.tolist()), self_bias=_r(d.attention_bias["self"].tolist()),
        cross_bias=[] if cross is None else _r(d.attention_bias["cross"].tolist()),
        feed_forward=_r(d.feed_forward.tolist()), embeddings=_r(d.embeddings.tolist()),
        final_bias=_r(d.final_bias.tolist()), norm_bias=None if d.norm_bias is None else _r(d.norm_bias.tolist()),
    )


def _target(
    served: ServedModel, text: str, target: str | None, beam: int, should_stop: Callable[[], bool]
) -> Translation:
    """The translation of ``text`` (or ``target`` teacher-forced), a :class:`Translation`."""
    translator = served.translator
    if target is not None:
        (result,) = translator.align([text], [target])
    else:
        (budget,) = limits.output_budgets(served, [len(translator.source_ids(text))], None)
        (result,) = translator.translate([text], beam_size=beam, max_length=budget, should_stop=should_stop)
    if not result.target_ids:
        raise InvalidInput(("body", "target"), "the target is empty: nothing to read")
    return result


def _aligned(served: ServedModel, text: str, target: str) -> Translation:
    """``target`` teacher-forced as the translation of ``text``; 422 when it has no token."""
    (result,) = served.translator.align([text], [target])
    if not result.target_ids:
        raise InvalidInput(("body", "target"), "the target is empty: nothing to read")
    return result


async def _priced(
    service: ServiceDep, served: ServedModel, route: str, source: tuple[str, int], target: str | None, *,
    beams: int, gone: threading.Event,
) -> tuple[Translation | None, Cost]:
    """``route``'s price (:func:`route_prices.price_route`, 422 past a limit) on the given
    ``target``, or on the model's translation of the source (text, tokens with EOS) at ``beams``,
    made first in a slot of its own (:func:`route_prices.translate_first`) and returned."""
    settings, config = service.settings, served.loaded.config
    if target is not None:
        length = limits.check_text(settings, served, target, ("body", "target"), empty_ok=True)
        return None, route_prices.price_route(settings, route, route_prices.shape_of(config, source[1], length))
    result = await route_prices.translate_first(service, served, source[0], beams=beams, gone=gone)
    if not result.target_ids:
        raise InvalidInput(("body", "target"), "the target is empty: nothing to read")
    shape = route_prices.shape_of(config, len(result.source_ids), len(result.target_ids))
    return result, route_prices.price_route(settings, route, shape)


@router.post("/lens", response_model=LensResponse, responses=ERRORS, summary="Logit lens and direct logit attribution")
async def lens_route(body: LensRequest, service: ServiceDep, request: Request) -> LensResponse:
    """Each decoder sublayer's residual stream read through the final norm and output layer, and
    the written word's logit split into heads, feed-forward blocks and embeddings."""
    llm = _llm(request, body.model)
    if llm is not None:
        return await _llm_lens(llm, body, service, request)
    async with service.holding(body.model) as served:  # loaded if needed, kept until answered
        return await _lens(served, body, service, request)


async def _lens(served: ServedModel, body: LensRequest, service: ServiceDep, request: Request) -> LensResponse:
    model = _model(served)
    source = (body.text, limits.check_text(service.settings, served, body.text, ("body", "text")))

    def job(translated: Translation | None, should_stop: Callable[[], bool]) -> LensResponse:
        result = translated or _aligned(served, body.text, body.target or "")
        found, dla = inspect(model, result.source_ids, result.target_ids, k=body.k)
        tok = served.loaded.tokenizer
        return LensResponse(
            model=served.loaded.id, translation=body.target if body.target is not None else result.text,
            source_tokens=tok.pieces(result.source_ids), target_tokens=tok.pieces(result.target_ids),
            points=found.labels, top_tokens=[[tok.pieces(row) for row in point] for point in found.top_ids.tolist()],
            top_probs=_r(found.top_probs.tolist()), rank=found.rank.tolist(), prob=_r(found.prob.tolist()),
            emergence=[None if e is None else found.labels[e] for e in found.emergence],
            attribution=None if dla is None else _attribution(dla),
        )

    async with watch_disconnect(request) as gone:
        translated, cost = await _priced(service, served, "lens", source, body.target, beams=body.beam_size, gone=gone)
        return await service.run_stoppable(partial(job, translated), gone=gone, cost=cost)


@router.post("/patch", response_model=PatchResponse, responses=ERRORS, summary="Activation patching between two sources")
async def patch_route(body: PatchRequest, service: ServiceDep, request: Request) -> PatchResponse:
    """How much of the difference between two sources each decoder head and each encoder
    position carries: the clean run with one piece from the corrupted run."""
    llm = _llm(request, body.model)
    if llm is not None:
        return await _llm_patch(llm, body, service, request)
    async with service.holding(body.model) as served:  # loaded if needed, kept until answered
        return await _patch(served, body, service, request)


async def _patch(served: ServedModel, body: PatchRequest, service: ServiceDep, request: Request) -> PatchResponse:
    if is_rnn(served.loaded.model):
        return await _rnn_patch(served, body, service, request)
    model = _model(served)
    clean = limits.check_text(service.settings, served, body.clean, ("body", "clean"))
    corrupted = limits.check_text(service.settings, served, body.corrupted, ("body", "corrupted"))
    if clean != corrupted:
        raise InvalidInput(("body", "corrupted"), f"has {corrupted} tokens and the clean source {clean} (both with "
                           "</s>): patching replaces position by position, so they must be equally long")

    def job(translated: Translation | None, should_stop: Callable[[], bool]) -> PatchResponse:
        result = translated or _aligned(served, body.clean, body.target or "")
        target = result.target_ids
        if body.position is not None and body.position >= len(target):
            raise InvalidInput(("body", "position"), f"is {body.position}; the target has {len(target)} tokens")
        corrupt_ids = served.translator.source_ids(body.corrupted)
        grids = patch(model, result.source_ids, corrupt_ids, target, position=body.position, should_stop=should_stop)
        tok = served.loaded.tokenizer
        sel = slice(None) if body.position is None else slice(body.position, body.position + 1)
        return PatchResponse(
            model=served.loaded.id, translation=body.target if body.target is not None else result.text,
            clean_tokens=tok.pieces(result.source_ids), corrupted_tokens=tok.pieces(corrupt_ids),
            target_tokens=tok.pieces(target), position=body.position,
            self_heads=_r(grids.heads["self"].tolist()), cross_heads=_r(grids.heads["cross"].tolist()),
            position_rows=["embed"] + [f"enc {i + 1}" for i in range(grids.positions.size(0) - 1)],
            positions=_r(grids.positions.tolist()), clean_log_prob=_r(grids.clean.tolist()),
            corrupted_log_prob=_r(grids.corrupted.tolist()),
            total_effect=round(float((grids.corrupted - grids.clean)[sel].sum()), 5),
        )

    async with watch_disconnect(request) as gone:
        source = (body.clean, clean)
        translated, cost = await _priced(service, served, "patching", source, body.target, beams=body.beam_size, gone=gone)
        return await service.run_stoppable(partial(job, translated), gone=gone, cost=cost)


async def _rnn_patch(served: ServedModel, body: PatchRequest, service: ServiceDep, request: Request) -> PatchResponse:
    """An RNN: each decoder step's context vector from the corrupted run (any length)."""
    limits.check_text(service.settings, served, body.clean, ("body", "clean"))
    corrupted_length = limits.check_text(service.settings, served, body.corrupted, ("body", "corrupted"))

    def job(should_stop: Callable[[], bool]) -> PatchResponse:
        result = _target(served, body.clean, body.target, body.beam_size, should_stop)
        target = result.target_ids
        if body.position is not None and body.position >= len(target):
            raise InvalidInput(("body", "position"), f"is {body.position}; the target has {len(target)} tokens")
        _admit(service.settings, (2 + len(target)) * (corrupted_length + len(target)), "patching")
        corrupt_ids = served.translator.source_ids(body.corrupted)
        found = patch_context(served.loaded.model, result.source_ids, corrupt_ids, target,  # type: ignore[arg-type]
                              position=body.position, should_stop=should_stop)  # fmt: skip
        tok = served.loaded.tokenizer
        sel = slice(None) if body.position is None else slice(body.position, body.position + 1)
        return PatchResponse(
            model=served.loaded.id, translation=body.target if body.target is not None else result.text,
            clean_tokens=tok.pieces(result.source_ids), corrupted_tokens=tok.pieces(corrupt_ids),
            target_tokens=tok.pieces(target), position=body.position, self_heads=[], cross_heads=[],
            position_rows=[], positions=[], clean_log_prob=_r(found.clean.tolist()),
            corrupted_log_prob=_r(found.corrupted.tolist()),
            total_effect=round(float((found.corrupted - found.clean)[sel].sum()), 5),
            context_steps=_r(found.steps.tolist()), context_grid=_r(found.grid.tolist()),
        )

    async with watch_disconnect(request) as gone:
        return await service.run_stoppable(job, gone=gone)


# -- decoder-only LLM translators ------------------------------------------------------------

LLM_MAX_NEW_TOKENS = 64  # the output read when no target is given (as /api/llm/translate's default)


def _llm(request: Request, model_id: str) -> LLMTranslator | None:
    """The decoder-only translator of ``model_id`` (served by ``app.state.llm``), or None."""
    llm_service = getattr(request.app.state, "llm", None)
    models = getattr(llm_service, "models", None) or {}
    return models.get(model_id)


async def _llm_read(
    service: ServiceDep, translator: LLMTranslator, text: str, target: str | None, *, beam: int,
    gone: threading.Event, field: str = "text",
) -> tuple[Prompt, list[int], str]:
    """The prompt of ``text``, the ids written after it (``target``'s, teacher-forced, then the
    stop token; else the model's own translation, made first in a decode slot of its own under its
    own price, so the route after it is priced on the real target) and their text."""
    config = translator.loaded.config
    try:
        prompt = translator.prompt(text)
    except PromptError as exc:
        raise InvalidInput(("body", field), str(exc)) from None
    if target is not None:
        ids = translator.loaded.tokenizer.encode(target)
        if not ids:
            raise InvalidInput(("body", "target"), "the target has no tokens")
        return prompt, ids + [config.stop_ids[0]], target
    budget = min(LLM_MAX_NEW_TOKENS, config.max_positions - len(prompt.ids))
    if budget < 1:
        raise InvalidInput(("body", field), f"the prompt has {len(prompt.ids)} tokens: no room for an output")
    cost = llm_route_prices.price_llm_route(service.settings, "llm_translation", config, len(prompt.ids), budget, beam)
    options = LLMOptions(beam_size=beam, max_new_tokens=budget, need_weights=False)
    result = await service.run_stoppable(lambda should_stop: translator.translate(text, options), gone=gone, cost=cost)
    if not result.target_ids:
        raise InvalidInput(("body", "target"), "the target is empty: nothing to read")
    return prompt, result.target_ids, result.text


def _llm_positions(translator: LLMTranslator, prompt: Prompt, target: list[int]) -> None:
    if len(prompt.ids) + len(target) - 1 > translator.loaded.config.max_positions:
        raise InvalidInput(("body", "target"), f"the prompt and target take {len(prompt.ids) + len(target) - 1} "
                           f"positions; the model has {translator.loaded.config.max_positions}")


async def _llm_lens(translator: LLMTranslator, body: LensRequest, service: ServiceDep, request: Request) -> LensResponse:
    model, texts = translator.loaded.model, translator.token_texts
    async with watch_disconnect(request) as gone:
        prompt, target, text = await _llm_read(service, translator, body.text, body.target, beam=body.beam_size, gone=gone)
        _llm_positions(translator, prompt, target)
        # priced by the model's size before the job (422 past a limit, 503 past the deadline)
        cost = llm_route_prices.price_llm_route(service.settings, "llm_lens", model.config, len(prompt.ids), len(target))

        def job(should_stop: Callable[[], bool]) -> LensResponse:
            found, dla = llm_inside.inspect(model, prompt.ids, target, k=body.k)
            start, end = prompt.source_span
            return LensResponse(
                model=body.model, translation=text, source_tokens=prompt.tokens[start:end], target_tokens=texts(target),
                points=found.labels, top_tokens=[[texts(row) for row in point] for point in found.top_ids.tolist()],
                top_probs=_r(found.top_probs.tolist()), rank=found.rank.tolist(), prob=_r(found.prob.tolist()),
                emergence=[None if e is None else found.labels[e] for e in found.emergence],
                attribution=_attribution(dla),
            )

        return await service.run_stoppable(job, gone=gone, cost=cost)


async def _llm_patch(translator: LLMTranslator, body: PatchRequest, service: ServiceDep, request: Request) -> PatchResponse:
    model, texts = translator.loaded.model, translator.token_texts
    async with watch_disconnect(request) as gone:
        prompt, target, text = await _llm_read(service, translator, body.clean, body.target, beam=body.beam_size,
                                               gone=gone, field="clean")  # fmt: skip
        try:
            corrupted = translator.prompt(body.corrupted)
        except PromptError as exc:
            raise InvalidInput(("body", "corrupted"), str(exc)) from None
        if len(corrupted.ids) != len(prompt.ids):
            raise InvalidInput(("body", "corrupted"), f"its prompt has {len(corrupted.ids)} tokens and the clean "
                               f"one {len(prompt.ids)}: patching replaces position by position, so they must be "
                               "equally long")  # fmt: skip
        if body.position is not None and body.position >= len(target):
            raise InvalidInput(("body", "position"), f"is {body.position}; the target has {len(target)} tokens")
        _llm_positions(translator, prompt, target)
        c = model.config
        # priced by the model's size before the job (issue 45: a 0.5B grid priced by positions ran 8 min)
        cost = llm_route_prices.price_llm_route(service.settings, "llm_patching", c, len(prompt.ids), len(target))

        def job(should_stop: Callable[[], bool]) -> PatchResponse:
            grids = llm_inside.patch(model, prompt.ids, corrupted.ids, target, position=body.position,
                                     should_stop=should_stop)  # fmt: skip
            sel = slice(None) if body.position is None else slice(body.position, body.position + 1)
            return PatchResponse(
                model=body.model, translation=text, clean_tokens=prompt.tokens, corrupted_tokens=corrupted.tokens,
                target_tokens=texts(target), position=body.position, self_heads=_r(grids.heads.tolist()),
                cross_heads=[], position_rows=["embed"] + [f"after {i}" for i in range(1, c.layers)],
                positions=_r(grids.positions.tolist()), clean_log_prob=_r(grids.clean.tolist()),
                corrupted_log_prob=_r(grids.corrupted.tolist()),
                total_effect=round(float((grids.corrupted - grids.clean)[sel].sum()), 5),
                source_span=list(prompt.source_span),
            )

        return await service.run_stoppable(job, gone=gone, cost=cost)
