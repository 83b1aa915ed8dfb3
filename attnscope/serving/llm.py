"""The decoder-only LLM API under ``/api/llm`` and its page (``/llm``).

Thin: each route validates its body into an :class:`~attnscope.llm.service.LLMRequest` and asks
the :class:`~attnscope.llm.service.LLMService` in a decode slot of the translation service (the
queue bound, the deadline and shutdown apply as to a translation). Models load in the app's
lifespan (:func:`load`) beside the encoder-decoders."""

from __future__ import annotations

import secrets
from contextlib import nullcontext
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field, model_validator

from attnscope.config import Settings
from attnscope.device import resolve_device
from attnscope.engine.schemas import ErrorResponse
from attnscope.explain import registry as explain_registry
from attnscope.llm.search import LLMOptions
from attnscope.llm.service import Budget, LLMRequest, LLMRequestError, LLMService
from attnscope.nn.ablation import disabled_heads
from attnscope.serving import llm_common
from attnscope.serving.errors import InvalidInput
from attnscope.serving.pages import templates

ViewName = Literal["target_source", "source_source", "target_target", "full"]


def make_service(settings: Settings) -> LLMService:
    """The decoder-only service of ``settings`` (cheap: its models load in :func:`load`)."""
    budget = Budget(max_floats=settings.max_attention_floats, max_answer_bytes=settings.max_answer_bytes)
    return LLMService(settings.models_dir, resolve_device(settings.device), budget)


async def load(app: FastAPI, service: LLMService) -> None:
    """Load the decoder-only models (in a worker thread); until then the routes answer 503."""
    await anyio.to_thread.run_sync(service.load_all)
    app.state.llm = service


router = APIRouter(prefix="/api/llm", tags=["llm"])
# What the decoding routes may answer besides 200 (422: the app's own error body, as every route's).
_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorResponse, "description": "A field out of range or malformed JSON, with a message per field."},
    404: {"model": ErrorResponse, "description": "No decoder-only model of that id is served."},
    413: {"model": ErrorResponse, "description": "The answer would pass the size bound: a shorter text or max_new_tokens."},
    503: {"model": ErrorResponse, "description": "The decoder-only models are still loading, or the server is busy (Retry-After)."},
    504: {"model": ErrorResponse, "description": "The decode passed its deadline."},
}
pages = APIRouter(include_in_schema=False, tags=["pages"])


async def get_service(request: Request) -> LLMService:
    service = getattr(request.app.state, "llm", None)
    if service is None:
        raise HTTPException(status_code=503, detail="the decoder-only models are still loading")
    return service


ServiceDep = Annotated[LLMService, Depends(get_service)]


class HeadOff(BaseModel):
    layer: int = Field(ge=0)
    head: int = Field(ge=0, description="A query head (grouped-query attention shares key/value heads).")


class LLMTranslateRequest(BaseModel):
    model: str = Field(description="A decoder-only model id (GET /api/llm/models).")
    text: str = Field(min_length=1, max_length=4000, description="The source text.")
    beam_size: int = Field(default=1, ge=1, le=8)
    max_new_tokens: int = Field(default=64, ge=1, le=512, description="Output budget, the stop token included.")
    length_penalty: float = Field(default=1.0, ge=-5, le=5, description="Beam scores ÷ length^this (as generate).")
    sample: bool = Field(default=False, description="Draw the output (temperature, top_k, top_p) instead of searching.")
    temperature: float = Field(default=1.0, gt=0, le=10)
    top_k: int = Field(default=0, ge=0, description="0: every token.")
    top_p: float = Field(default=1.0, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1, description="Same seed, same sample.")
    prompt_template: str | None = Field(
        default=None, max_length=8000,
        description="The whole prompt text with one {source} (and optionally {source_language}, "
        "{target_language}); default: the model card's.",
    )  # fmt: skip
    views: list[ViewName] = Field(default=["target_source"], description="Attention views to return.")
    attention: bool = Field(default=True, description="false: no attention at all (the fused kernel runs).")
    disable_heads: list[HeadOff] = Field(default=[], max_length=4096)
    explain: list[Literal["rollout", "norm", "value_zeroing", "alti"]] = Field(
        default=[], description="Add `explanations`: `rollout` (per layer, over the causal stack), `norm` "
        "(α·‖value·W_O‖ per query head), `value_zeroing` (per layer) and/or `alti` (per layer: "
        "target_source, target_target, source_share, source_source), cut like the views; the same "
        "values /api/translate answers for the model (docs/llm.md).",
    )  # fmt: skip

    @model_validator(mode="after")
    def _one_search(self) -> LLMTranslateRequest:
        if self.sample and self.beam_size > 1:
            raise ValueError("sampling draws one output: use beam_size 1")
        if self.explain and not self.attention:
            raise ValueError("explain needs the attention: leave attention true")
        return self

    def to_request(self, target: str | None = None) -> LLMRequest:
        """The engine's request; a sample without a seed gets a random one, named in the answer's
        ``search`` so that it can be drawn again."""
        seed = self.seed if self.seed is not None or not self.sample else secrets.randbelow(2**31)
        options = LLMOptions(
            beam_size=self.beam_size, max_new_tokens=self.max_new_tokens, length_penalty=self.length_penalty,
            sample=self.sample, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, seed=seed,
            need_weights=self.attention,
        )  # fmt: skip
        return LLMRequest(
            model=self.model, text=self.text, options=options, template=self.prompt_template,
            views=tuple(dict.fromkeys(self.views)) if self.attention else (),
            heads_off=tuple((h.layer, h.head) for h in self.disable_heads), target=target,
            explain=tuple(dict.fromkeys(self.explain)),
        )  # fmt: skip


class LLMAlignRequest(LLMTranslateRequest):
    target: str = Field(min_length=1, max_length=4000, description="The translation to score, teacher-forced.")


# The methods the explanation registry runs for this route (rollout and norm: the service's own)
REGISTERED = ("value_zeroing", "alti")


def _registered(service: LLMService, body: LLMRequest, answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` with the asked registry methods added to its ``explanations``, renamed as the
    views: ``value_zeroing`` {``target_source`` [L][T][S]}; ``alti`` {``target_source`` [L][T][S],
    ``target_target`` [L][T][T], ``source_share`` [T], ``source_source`` [L][S][S]}. The registry's
    decoder-only runners (what ``/api/translate`` answers as ``cross``, ``target``, ``encoder``),
    teacher-forced on the answer's prompt and output, under the same heads switched off."""
    asked = [name for name in REGISTERED if name in body.explain]
    if not asked or answer.get("attention") is None or not answer["target_token_ids"]:
        return answer
    model = service.get(body.model).loaded.model
    sentence = explain_registry.Sentence(model, answer["prompt_token_ids"], answer["target_token_ids"],
                                         source_span=tuple(answer["source_span"]))  # fmt: skip
    off = [("decoder_self", layer, head) for layer, head in body.heads_off]
    found = answer.setdefault("explanations", {})
    with disabled_heads(model, off) if off else nullcontext():
        if "value_zeroing" in asked:
            zeroed = explain_registry.method("value_zeroing").runs["decoder_only"](sentence)
            found["value_zeroing"] = {"target_source": zeroed["cross"].tolist()}
        if "alti" in asked:
            a = explain_registry.method("alti").runs["decoder_only"](sentence)
            found["alti"] = {"target_source": a.source.tolist(), "target_target": a.target.tolist(),
                             "source_share": a.source_share.tolist(), "source_source": a.encoder.tolist()}  # fmt: skip
    return answer


async def _answer(request: Request, service: LLMService, body: LLMRequest) -> dict[str, Any]:
    try:  # priced by the model's size before the job (issue 45): 422 past a limit, 503 past the deadline
        cost = llm_common.request_price(request.app.state.service.settings, service.get(body.model), [body])
        answer: dict[str, Any] = await request.app.state.service.run_alone(
            lambda: _registered(service, body, service.answer(body)), cost=cost
        )
    except LLMRequestError as err:
        if err.status == 422:
            raise InvalidInput(("body", err.field), err.message) from None
        raise HTTPException(status_code=err.status, detail=err.message) from None
    return answer


@router.get("/models", responses={503: _RESPONSES[503]}, summary="The decoder-only models served, with their prompt templates")
async def models(service: ServiceDep) -> dict[str, Any]:
    return {"models": service.describe(), "unavailable": service.failed}


@router.post("/translate", responses=_RESPONSES, summary="Translate with a decoder-only model and see where each output token looked")
async def translate(body: LLMTranslateRequest, service: ServiceDep, request: Request) -> dict[str, Any]:
    """The answer names exactly what ran (``prompt``, ``prompt_tokens``, ``prompt_token_ids``,
    ``source_span`` [start, end) in prompt tokens, ``target_token_ids``) and carries the asked
    attention views per layer × query head: ``target_source`` (the output rows over the source
    span), ``source_source``, ``target_target``, ``full`` (the causal matrix over prompt + output
    but its last token), and ``outside_source``, each output row's attention mass elsewhere."""
    return await _answer(request, service, body.to_request())


@router.post("/align", responses=_RESPONSES, summary="Teacher-forced: the attention a decoder-only model pays reading your translation")
async def align(body: LLMAlignRequest, service: ServiceDep, request: Request) -> dict[str, Any]:
    return await _answer(request, service, body.to_request(target=body.target))


@pages.get("/llm", response_class=HTMLResponse)
def llm_page(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "llm.html", {"page": "llm", "examples": {}, "cards": []})
