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

import time
from contextlib import nullcontext
from typing import Any, cast

from fastapi import HTTPException, Request

from attnscope.engine.answers import words
from attnscope.engine.attention_store import Recorded, kept
from attnscope.engine.errors import InvalidInput
from attnscope.engine.head_scores import CardAlignment, card_head_scores
from attnscope.engine.heads import HeadRef
from attnscope.engine.schemas import (
    AttentionShape,
    BeamHypothesis,
    BeamNode,
    BeamTree,
    Explanations,
    ModelInfo,
    TranslationResponse,
)
from attnscope.engine.service import ModelService
from attnscope.explain import registry as explain_registry
from attnscope.llm.common import KINDS, context, kind_tensors, kinds_asked, llm_requests, rounded
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


async def translate(service: ModelService, llm: LLMService, body: Any) -> list[TranslationResponse]:
    """One answer per text of a translate or batch body (texts decoded one after another in one slot)."""
    translator, requests = _checked(llm, body)
    return await _run(service, llm, translator, requests, body)


async def align(service: ModelService, llm: LLMService, body: Any) -> TranslationResponse:
    """The model teacher-forced on ``body.target`` (its tokens, then the stop token)."""
    translator, requests = _checked(llm, body)
    return (await _run(service, llm, translator, requests, body))[0]


async def _run(
    service: ModelService, llm: LLMService, translator: LLMTranslator, requests: list[LLMRequest], body: Any
) -> list[TranslationResponse]:
    def job() -> list[TranslationResponse]:
        answers = []
        for request in requests:
            start = time.perf_counter()
            try:
                result = llm.run(request)
            except LLMRequestError as err:
                raise _http(err) from None
            answers.append(_answer(service, translator, request, result, body, start))
        return answers

    answers: list[TranslationResponse] = await service.run_alone(job)
    return answers


def _answer(
    service: ModelService, translator: LLMTranslator, request: LLMRequest, result: LLMTranslation, body: Any,
    start: float,
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
                            target_ids=tuple(result.target_ids))  # fmt: skip
        fields["attention_id"] = service.attention_store.put(recorded)
        fields["attention_shapes"] = {k: AttentionShape(**s) for k, s in recorded.shapes().items()}
        for name, found in explained.items():  # GET /api/attention/{id}/{kind}/...?method= reads them
            service.attention_store.attach(fields["attention_id"], name, kept(_matrices(found)))
    logprobs = [round(float(x), 6) for x in result.generation.token_logprobs]
    return TranslationResponse.model_construct(
        model=request.model, translation=result.text if request.target is None else request.target,
        source_tokens=source, target_tokens=target, decoder_input_tokens=[p.tokens[-1], *target[:-1]],
        eos_token=translator.token_texts(config.stop_ids[:1])[0],
        finished=bool(result.target_ids) and result.target_ids[-1] in config.stop_ids,
        source_words=words(source), target_words=words(target),
        attention={k: rounded(t, decimals) for k, t in tensors.items() if k in kinds},
        attention_cost={k: t.numel() for k, t in tensors.items()}, score=None,
        logprob=round(sum(logprobs), 6), target_logprobs=logprobs, forced_tokens=0,
        beam=_path(result, logprobs) if getattr(body, "return_beam", False) else None,
        disabled_heads=[HeadRef(kind="decoder_self", layer=layer, head=head) for layer, head in request.heads_off],
        explanations=_encoded(explained, decimals) if request.explain else None,
        llm=context(result, decimals), timing_ms=round((time.perf_counter() - start) * 1000, 3),
        word_alignment=None, protected=None, rescored=False, missing_words=[], confidence=None,
        attention_scores=None, context_norms=None, context_vectors=None, key_dim=None, alternatives=None,
        **fields,
    )  # fmt: skip


def _path(result: LLMTranslation, logprobs: list[float]) -> BeamTree:
    """The returned hypothesis as a beam tree of one path (root = the last prompt token)."""
    nodes, score = [BeamNode(id=0, parent=None, step=0, token=result.prompt.tokens[-1],
                             token_id=result.prompt.ids[-1], logprob=0.0, score=0.0, finished=False)], 0.0  # fmt: skip
    for step, (token, token_id, logprob) in enumerate(zip(result.target_tokens, result.target_ids, logprobs, strict=True), 1):
        score += logprob
        nodes.append(BeamNode(id=step, parent=step - 1, step=step, token=token, token_id=token_id, logprob=logprob,
                              score=round(score, 6), finished=step == len(logprobs)))  # fmt: skip
    best = BeamHypothesis(node=len(nodes) - 1, translation=result.text, tokens=result.target_tokens,
                          score=round(score, 6), ranking=result.generation.score)  # fmt: skip
    return BeamTree(nodes=nodes, best=[n.id for n in nodes], hypotheses=[best])


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
    """A result as kind -> tensor (the norm's weighted matrices; rollout's mapping as it is)."""
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
