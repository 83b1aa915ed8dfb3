"""Decoder-only models through the doors every model has: ``POST /api/translate``,
``/api/translate/batch``, ``/api/align`` and ``GET /api/models`` (docs/llm.md, "The common answer").

The routes of :mod:`attnscope.serving.api` ask :func:`served_llm` whether a model id names a
decoder-only model; if so the request goes to :func:`translate` / :func:`align` here instead of
the encoder-decoder engine. The request is read by :func:`attnscope.llm.common.llm_requests`, decoded
in a slot of the translation service (:meth:`~attnscope.engine.service.ModelService.run_alone`:
queue bound, deadline and shutdown as for a translation) and answered as a
:class:`~attnscope.engine.schemas.TranslationResponse`: the kinds ``cross`` (output × source),
``encoder_self`` (source × source) and ``decoder_self`` (output × BOS-like last prompt token +
output) are views of the one causal matrix, and the extra field ``llm`` names exactly what ran.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from typing import Any, cast

from fastapi import HTTPException, Request

from attnscope.attribution import normalise_rows, summary
from attnscope.config import Settings
from attnscope.engine.answers import words
from attnscope.engine.attention_store import Recorded, kept
from attnscope.engine.attribution_answer import (
    AttributionRequest,
    AttributionResponse,
    ContrastiveAttribution,
    ContrastRequest,
    Correlations,
)
from attnscope.engine.errors import InvalidInput
from attnscope.engine.head_scores import CardAlignment, card_head_scores
from attnscope.engine.heads import HeadRef
from attnscope.engine.limits import Cost
from attnscope.engine.llm_route_prices import price_llm_route
from attnscope.engine.route_prices import ROUTE_PRICES
from attnscope.engine.schemas import (
    Alternative,
    AttentionShape,
    BeamHypothesis,
    BeamNode,
    BeamTree,
    Explanations,
    ModelInfo,
    TranslateRequest,
    TranslationResponse,
)
from attnscope.engine.service import ModelService
from attnscope.explain import registry as explain_registry
from attnscope.explain.alti import Alti
from attnscope.llm.attribution import attribute_llm, contrast_llm
from attnscope.llm.beamtree import TreeRecorder
from attnscope.llm.common import (
    KINDS,
    METHODS,
    StepEvents,
    context,
    extras,
    kind_tensors,
    kinds_asked,
    llm_requests,
    rounded,
)
from attnscope.llm.explain import UNAVAILABLE
from attnscope.llm.prompt import PromptError
from attnscope.llm.search import StepHook
from attnscope.llm.service import LLMRequest, LLMRequestError, LLMService
from attnscope.llm.translator import LLMTranslation, LLMTranslator
from attnscope.nn.ablation import disabled_heads

MAX_NEW_TOKENS = 512  # /api/llm/translate's bound on max_new_tokens (and the common max_length's)


def served_llm(request: Request, model_id: str) -> LLMService | None:
    """The decoder-only service when ``model_id`` is one of its models (loaded or failed), else None."""
    llm = getattr(request.app.state, "llm", None)
    if llm is not None and (model_id in llm.models or model_id in llm.failed):
        return cast(LLMService, llm)
    return None


def _checked(llm: LLMService, body: Any) -> tuple[LLMTranslator, list[LLMRequest]]:
    try:
        translator = llm.get(body.model)
        return translator, llm_requests(body, source_lang=translator.loaded.source_lang,
                                        target_lang=translator.loaded.target_lang)  # fmt: skip
    except LLMRequestError as err:
        raise _http(err) from None


def _http(err: LLMRequestError) -> Exception:
    if err.status == 422:
        return InvalidInput(("body", err.field), err.message)
    return HTTPException(status_code=err.status, detail=err.message)


async def translate(
    service: ModelService, llm: LLMService, body: Any, *, on_step: StepHook | None = None,
    gone: threading.Event | None = None,
) -> list[TranslationResponse]:  # fmt: skip
    """One answer per text of a translate or batch body (texts decoded one after another in one
    slot); ``on_step`` hears each step of a greedy or sampled decode (the stream), ``gone`` is
    set when the client leaves (the slot's stop)."""
    translator, requests = _checked(llm, body)
    return await _run(service, llm, translator, requests, body, on_step=on_step, gone=gone)


async def align(service: ModelService, llm: LLMService, body: Any) -> TranslationResponse:
    """The model teacher-forced on ``body.target`` (its tokens, then the stop token)."""
    translator, requests = _checked(llm, body)
    return (await _run(service, llm, translator, requests, body))[0]


async def _run(
    service: ModelService, llm: LLMService, translator: LLMTranslator, requests: list[LLMRequest], body: Any, *,
    on_step: StepHook | None = None, gone: threading.Event | None = None,
) -> list[TranslationResponse]:  # fmt: skip
    def job() -> list[TranslationResponse]:
        answers = []
        for request in requests:
            start = time.perf_counter()
            recorder = _recorder(translator, request, on_step) if getattr(body, "return_beam", False) else None
            try:
                result = llm.run(request, on_step=recorder or on_step)
            except LLMRequestError as err:
                raise _http(err) from None
            answers.append(_answer(service, translator, request, result, body, start, recorder=recorder))
        return answers

    cost = request_price(service.settings, translator, requests)
    answers: list[TranslationResponse] = await service.run_alone(job, gone=gone, cost=cost)
    return answers


def request_price(settings: Settings, translator: LLMTranslator, requests: list[LLMRequest]) -> Cost:
    """Admission's price of decoding (or teacher-forcing) ``requests`` and explaining them, by the
    model's size (:mod:`attnscope.engine.llm_route_prices`): 422 past a limit, and the work the
    scheduler weighs for its 503. A generated output is priced at its bound (``max_new_tokens``,
    within the model's positions); a prompt the translator refuses is left to the job's 422."""
    config, total = translator.loaded.config, Cost()
    for r in requests:
        try:
            p = translator.prompt(r.text, r.template)
        except (PromptError, ValueError):
            continue
        prompt, span = len(p.ids), p.source_span[1] - p.source_span[0]
        if r.target is not None:
            target, beams = len(translator.loaded.tokenizer.encode(r.target)) + 1, 1
        else:
            target = max(1, min(r.options.max_new_tokens, config.max_positions - prompt))
            beams = 1 if r.options.sample else r.options.beam_size
        total += price_llm_route(settings, "llm_translation", config, prompt, target, beams)
        for method in r.explain:
            if f"llm_explain_{method}" in ROUTE_PRICES:
                total += price_llm_route(settings, f"llm_explain_{method}", config, prompt, target, span=span)
    return total


def _answer(
    service: ModelService, translator: LLMTranslator, request: LLMRequest, result: LLMTranslation, body: Any,
    start: float, *, recorder: TreeRecorder | None = None,
) -> TranslationResponse:  # fmt: skip
    """The common answer of one decoder-only result (module docstring)."""
    p, decimals = result.prompt, int(getattr(body, "precision", 6))
    source = p.tokens[p.source_span[0] : p.source_span[1]]
    target = result.target_tokens
    config = translator.loaded.config
    kinds, on_demand = kinds_asked(getattr(body, "attention", None))
    tensors = kind_tensors(result.views) if result.views is not None else {}
    fields: dict[str, Any] = {}
    explained = _explain(translator, request, result) if request.explain else {}
    if on_demand and tensors:
        recorded = Recorded(model=request.model, attention=kept(dict(tensors)), source_ids=tuple(p.ids),
                            target_ids=tuple(result.target_ids), source_span=p.source_span,
                            disabled=tuple(("decoder_self", layer, head) for layer, head in request.heads_off))  # fmt: skip
        fields["attention_id"] = service.attention_store.put(recorded)
        fields["attention_shapes"] = {k: AttentionShape(**s) for k, s in recorded.shapes().items()}
        for name, found in explained.items():  # GET /api/attention/{id}/{kind}/...?method= reads them
            service.attention_store.attach(fields["attention_id"], name, kept(_matrices(found)))
    logprobs = [round(float(x), 6) for x in result.generation.token_logprobs]
    added, anatomy = extras(translator, request, result, decimals)
    if "alternatives" in added:
        ids = [i for step in added["alternatives"] for i, _ in step]
        pieces = iter(translator.token_texts(ids))
        added["alternatives"] = [[Alternative(token=next(pieces), token_id=i, logprob=round(lp, 6)) for i, lp in step]
                                 for step in added["alternatives"]]  # fmt: skip
    ctx = context(result, decimals) | ({"anatomy": anatomy} if anatomy else {})
    return TranslationResponse.model_construct(
        model=request.model, translation=result.text if request.target is None else request.target,
        source_tokens=source, target_tokens=target, decoder_input_tokens=[p.tokens[-1], *target[:-1]],
        eos_token=translator.token_texts(config.stop_ids[:1])[0],
        finished=bool(result.target_ids) and result.target_ids[-1] in config.stop_ids,
        source_words=words(source), target_words=words(target),
        attention={k: rounded(t, decimals) for k, t in tensors.items() if k in kinds},
        attention_cost={k: t.numel() for k, t in tensors.items()}, score=None,
        logprob=round(sum(logprobs), 6), target_logprobs=logprobs, forced_tokens=result.forced_tokens,
        beam=_tree(translator, recorder, result) if recorder is not None else None,
        disabled_heads=[HeadRef(kind="decoder_self", layer=layer, head=head) for layer, head in request.heads_off],
        explanations=_encoded(explained, decimals) if request.explain else None,
        llm=ctx, timing_ms=round((time.perf_counter() - start) * 1000, 3),
        word_alignment=None, protected=None, rescored=False, missing_words=[], confidence=None,
        **({"attention_scores": None, "key_dim": None, "alternatives": None} | added),
        context_norms=None, context_vectors=None, **fields,
    )  # fmt: skip


def _recorder(translator: LLMTranslator, request: LLMRequest, then: StepHook | None) -> TreeRecorder | None:
    """The beam tree's recorder of a decode (None for a teacher-forced ``/api/align``)."""
    if request.target is not None:
        return None
    try:
        root = translator.prompt(request.text, request.template).ids[-1]
    except (PromptError, ValueError):  # the decode refuses it with its own message
        return None
    return TreeRecorder(root, translator.forced_ids(request.prefix), then=then)


def _tree(translator: LLMTranslator, recorder: TreeRecorder, result: LLMTranslation) -> BeamTree:
    """The recorded search as the common ``beam`` (root = the last prompt token, as its piece)."""
    tree = recorder.close(result.target_ids, result.generation.token_logprobs)
    pieces = translator.token_texts([node.token for node in tree.nodes])
    nodes = [BeamNode(id=n.id, parent=n.parent, step=n.step, token=piece, token_id=n.token, logprob=round(n.logprob, 6),
                      score=round(n.score, 6), finished=n.finished) for n, piece in zip(tree.nodes, pieces, strict=True)]  # fmt: skip
    special = translator._special_ids()
    hypotheses = [BeamHypothesis(node=h.node, translation=translator.loaded.tokenizer.decode([t for t in h.tokens if t not in special]).strip(),
                                 tokens=translator.token_texts(h.tokens), score=round(h.score, 6), ranking=round(h.ranking, 6))
                  for h in tree.hypotheses]  # fmt: skip
    return BeamTree(nodes=nodes, best=list(tree.best), hypotheses=hypotheses)


def _explain(translator: LLMTranslator, request: LLMRequest, result: LLMTranslation) -> dict[str, Any]:
    """Each asked method's result through the explanation registry's decoder-only runner, under
    the same heads switched off: shaped like the ``cross`` kind (output × source)."""
    model, p = translator.loaded.model, result.prompt
    sentence = explain_registry.Sentence(model, p.ids, result.target_ids, source_span=p.source_span)
    off = [("decoder_self", layer, head) for layer, head in request.heads_off]
    with disabled_heads(model, off) if off else nullcontext():
        return {name: explain_registry.method(name).runs["decoder_only"](sentence) for name in request.explain}


def _encoded(explained: dict[str, Any], decimals: int) -> Any:
    fields: dict[str, Any] = {}
    for name, found in explained.items():
        fields.update(explain_registry.method(name).encode(found, decimals))
    return Explanations.model_construct(**fields, unavailable={})


def _matrices(found: Any) -> dict[str, Any]:
    """A result as name -> tensor (the norm's weighted matrices, ALTI's source/target/encoder
    parts as ``GET /api/attention`` reads them; rollout's mapping as it is)."""
    if isinstance(found, Alti):
        return {"source": found.source, "target": found.target, "encoder": found.encoder}
    return dict(found.weighted) if hasattr(found, "weighted") else dict(found)


def model_infos(llm: LLMService | None, device: str) -> tuple[list[ModelInfo], dict[str, str]]:
    """``GET /api/models`` entries of the decoder-only models (architecture ``decoder_only``,
    heads = query heads, the three kinds, the card's ``alignment`` from ``evaluate --alignment``
    so the explorer opens on the best head), and the folders that failed, by id."""
    if llm is None:
        return [], {}
    infos = []
    for mid, t in llm.models.items():
        c, card = t.loaded.config, t.loaded.card
        scalars = {k: v for k, v in card.items() if isinstance(v, str | int | float | bool) or v is None}
        alignment, _, warnings = _head_scores(t)
        infos.append(ModelInfo.model_construct(
            id=mid, architecture="decoder_only", score=None, source_lang=t.loaded.source_lang,
            target_lang=t.loaded.target_lang, layers=c.layers, encoder_layers=c.layers, heads=c.heads,
            parameters=t.loaded.model.num_parameters, attention=list(KINDS), bleu=card.get("bleu"), chrf=None,
            device=device, card={**scalars, "prompt_template": t.template, "kv_heads": c.kv_heads},
            max_source_tokens=t.max_prompt_tokens, max_length=MAX_NEW_TOKENS, warnings=warnings, decoding={},
            protect=False, alignment=alignment, ablation=None, state="loaded",
        ))  # fmt: skip
    return infos, dict(llm.failed)


def _head_scores(t: LLMTranslator) -> tuple[CardAlignment | None, Any, list[str]]:
    """The card's head sections checked against the ``cross`` kind's (layers, query heads)."""
    shape = (t.loaded.config.layers, t.loaded.config.heads)
    return card_head_scores(t.loaded.card, {kind: shape for kind in KINDS})


def page_cards(llm: LLMService | None) -> list[dict[str, Any]]:
    """The decoder-only models' cards for the pages (the Models page), as the registry's
    ``page_cards`` writes an encoder-decoder's; a folder that failed has an ``error``."""
    if llm is None:
        return []
    cards = []
    for mid, t in llm.models.items():
        alignment, _, warnings = _head_scores(t)
        card = {k: v for k, v in t.loaded.card.items() if k not in ("alignment", "ablation")}
        cards.append({"architecture": "decoder_only", "score": None, "parameters": t.loaded.model.num_parameters,
                      **card, **({"alignment": t.loaded.card["alignment"]} if alignment else {}), "id": mid,
                      "source_lang": t.loaded.source_lang, "target_lang": t.loaded.target_lang,
                      "warnings": warnings, "has_analysis": False})  # fmt: skip
    return cards + [{"id": mid, "architecture": "decoder_only", "error": reason} for mid, reason in llm.failed.items()]


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
    translator, (request,) = _checked(llm, translate_body)
    if body.target is not None:
        request = replace(request, target=body.target)
    config, budget = translator.loaded.config, llm.budget.max_floats

    def translate_job() -> LLMTranslation:
        try:
            return llm.run(request)
        except LLMRequestError as err:
            raise _http(err) from None

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


def step_events(llm: LLMService, body: Any, store: Any = None) -> StepEvents | None:
    """The step events of a stream ``body`` (``attnscope.serving.stream``): None for a request
    the decode will refuse (the refusal is the stream's plain JSON error) or a teacher-forced
    one; 422/404 here for what the request itself gets wrong."""
    translator, (request,) = _checked(llm, body)
    if request.target is not None:
        return None
    try:
        prompt = translator.prompt(request.text, request.template)
    except (PromptError, ValueError):
        return None
    kinds, on_demand = kinds_asked(getattr(body, "attention", None))
    keep = None
    if on_demand and store is not None:  # each step's rows to the store, as an encoder-decoder's stream

        def keep(attention: dict[str, Any]) -> dict[str, Any]:
            recorded = Recorded(model=request.model, attention=kept(attention))
            return {"attention_id": store.put(recorded), "attention_shapes": recorded.shapes()}

    return StepEvents(translator, prompt, kinds, decimals=int(getattr(body, "precision", 6)),
                      beam=request.options.beam_size, keep=keep)  # fmt: skip


async def explain_stored(service: ModelService, request: Request, entry: Recorded, method: str) -> dict[str, Any]:
    """An explanation of a stored decoder-only answer, by id (``GET /api/attention/{id}/...?method=``):
    the registry's decoder-only runner on the recorded prompt, output and source span, with the
    answer's heads still off, in a slot of its own. 422 naming the reason for a method with no
    decoder-only definition (ALTI), 404 when the model is no longer served."""
    llm = served_llm(request, entry.model)
    if llm is None or entry.model not in llm.models:
        raise HTTPException(404, f"the decoder-only model {entry.model!r} of this answer is no longer served")
    if method not in METHODS:
        known = ", ".join(METHODS)
        reason = UNAVAILABLE.get(method, f"it has no definition for decoder-only models (they have: {known})")
        raise HTTPException(422, f"{method!r} is not available for decoder-only models: {reason}")
    if not entry.target_ids:
        raise HTTPException(422, "the target has no tokens to explain")
    model = llm.models[entry.model].loaded.model
    prompt, target = len(entry.source_ids), len(entry.target_ids)
    span = entry.source_span[1] - entry.source_span[0] if entry.source_span else prompt
    cost = price_llm_route(service.settings, f"llm_explain_{method}", model.config, prompt, target, span=span)
    sentence = explain_registry.Sentence(cast(Any, model), list(entry.source_ids), list(entry.target_ids),
                                         source_span=entry.source_span)  # fmt: skip

    def run() -> dict[str, Any]:
        with disabled_heads(model, list(entry.disabled)) if entry.disabled else nullcontext():
            return _matrices(explain_registry.method(method).runs["decoder_only"](sentence))

    found: dict[str, Any] = await service.run_alone(run, cost=cost)
    return found
