"""The service's request: made once from the validated body at the route, it travels unchanged
through the queue and the service to the translator and the decoder.

:class:`ServiceRequest` is what a client asked (one frozen value, for every route: translate,
batch, stream, align). :class:`TranslateKey` is what a batch decodes with, derived from it once:
requests whose keys are equal share a micro-batch (``attnscope.engine.batching``). :class:`Job` is
what one queued request carries besides its texts: the request, and what checking it against
the model resolved (budgets, the forced prefix, the alignment head, protect).

Adding a request field: a field of the body's schema (``attnscope.engine.schemas``) and one of the
same name here (:meth:`ServiceRequest.of` copies fields whose names match), read where it is
used. When it changes what is decoded (not only the answer), also a field of the same name in
``DecodeOptions`` (``attnscope.decoding.plan``): :meth:`ServiceRequest.decode_options` copies it, so
the batch key, the translator and the decoder all see it; no signature changes on the way."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from attnscope.alignment.hard import Choice
from attnscope.alignment.rows import Rows
from attnscope.decoding.plan import OPTION_NAMES, DecodeOptions
from attnscope.decoding.sampling import Sampling
from attnscope.decoding.steps import StepCallback
from attnscope.engine.attention_store import AttentionStore
from attnscope.engine.explain import NO_EXTRAS, Extras
from attnscope.engine.heads import AlignmentChoice, HeadRef
from attnscope.engine.schemas import (
    AlignRequest,
    AttentionKind,
    BatchTranslateRequest,
    TranslateRequest,
)
from attnscope.nn.ablation import HeadTuple

Body = TranslateRequest | BatchTranslateRequest | AlignRequest


@dataclass(frozen=True)
class AnswerOptions:
    """What each answer holds: the attention kinds (None: all the model has) and decimals;
    ``on_demand``: none in the answer (``kinds`` is empty), every kind kept in the service's
    attention store (``attnscope.engine.attention_store``) under an id the answer carries."""

    kinds: tuple[AttentionKind, ...] | None = None
    decimals: int = 6
    on_demand: bool = False

    @property
    def weights(self) -> bool:
        """Whether the decode needs to record attention at all."""
        return self.on_demand or self.kinds is None or len(self.kinds) > 0


@dataclass(frozen=True)
class ServiceRequest:
    """One request to the service, as validated at the route.

    texts: the source texts (one, except for the batch route, where ``batch`` names errors
    ``texts[i]``); target: the translation to score (``/api/align``); the decoding options as
    the API names them (``max_length`` None: each text's default budget; ``coverage_penalty``
    and ``protect`` None: the model's default); extras and answer: what the answer holds."""

    model: str
    texts: tuple[str, ...]
    beam_size: int = 5
    max_length: int | None = None
    coverage_penalty: float | None = None
    prefix: str | None = None
    protect: bool | None = None
    extras: Extras = NO_EXTRAS
    answer: AnswerOptions = AnswerOptions()  # noqa: RUF009 - frozen, so one shared default is safe
    alignment: AlignmentChoice | None = None
    disable_heads: tuple[HeadRef, ...] = ()
    batch: bool = False
    target: str | None = None
    source_lang: str | None = None  # a multilingual import's language codes (None: the card's)
    target_lang: str | None = None
    sampling: Sampling | None = None

    @property
    def languages(self) -> tuple[str | None, str | None]:
        return (self.source_lang, self.target_lang)

    @classmethod
    def of(cls, body: Body, **changes: Any) -> ServiceRequest:
        """The request of a validated body (``TranslateRequest``, ``BatchTranslateRequest``,
        ``AlignRequest``): its fields of the same names, the texts, the extras and the answer
        options; ``changes`` replace any of them."""
        given = type(body).model_fields
        values: dict[str, Any] = {f.name: getattr(body, f.name) for f in fields(cls) if f.name in given}
        batch = isinstance(body, BatchTranslateRequest)
        values["texts"] = tuple(body.texts) if isinstance(body, BatchTranslateRequest) else (body.text,)
        values["batch"] = batch
        values["disable_heads"] = tuple(values.get("disable_heads", ()))
        sampled = values.get("sampling")
        values["sampling"] = None if sampled is None else Sampling(**sampled.model_dump())
        extras = {f.name: getattr(body, f.name) for f in fields(Extras) if f.name in given}
        values["extras"] = Extras(**{**extras, "explain": tuple(extras.get("explain", ()))})
        kinds = body.attention
        if kinds == "on_demand":
            values["answer"] = AnswerOptions((), body.precision, on_demand=True)
        else:
            values["answer"] = AnswerOptions(None if kinds is None else tuple(kinds), body.precision)
        return cls(**{**values, **changes})

    def decode_options(self, *, weights: bool) -> DecodeOptions:
        """The options every text of this request decodes with: the request's fields named as
        options (``beam_size``, ``coverage_penalty``...), the beam tree when asked for, and
        ``weights``: record the attention. The budgets and forced prefix are per text: the
        batch's runner adds them."""
        shared = {name: getattr(self, name) for name in _SHARED}
        return DecodeOptions(**shared, need_weights=weights, return_tree=self.extras.return_beam)


# Request fields that are decoding options of the same name and meaning (max_length and prefix
# are not: the request's are a number and a text, the decoder's per-text budgets and ids).
_SHARED = sorted(({f.name for f in fields(ServiceRequest)} & OPTION_NAMES) - {"max_length", "prefix"})


@dataclass(frozen=True)
class TranslateKey:
    """Requests decode together only when all of these are equal: the model, the decoding
    options (without the per-text budgets and prefixes), the heads switched off (they change
    the decode itself) and placeholders (they change what is decoded). A streamed request (its
    ticket's id in ``stream``) decodes alone: its steps are its own."""

    model: str
    decode: DecodeOptions
    disabled: tuple[HeadTuple, ...] = ()
    protect: bool = False
    stream: int = 0
    languages: tuple[str | None, str | None] = (None, None)  # source_lang, target_lang (None: the card's)


@dataclass(frozen=True)
class AlignKey:
    model: str
    disabled: tuple[HeadTuple, ...] = ()


@dataclass(frozen=True)
class Job:
    """A queued request's part of a batch: the request as asked, the extras it gets (the beam
    tree is dropped under protect: it searched the masked text), each text's forced target ids
    (empty: none), the hard-alignment head and row convention, the step callback of a
    stream, and the attention store of an on-demand request."""

    request: ServiceRequest
    extras: Extras = NO_EXTRAS
    prefixes: tuple[tuple[int, ...], ...] = ()
    choice: tuple[Choice, Rows] | None = None
    on_step: StepCallback | None = field(default=None, compare=False)
    store: AttentionStore | None = field(default=None, compare=False)  # where on-demand attention goes

    @property
    def answer(self) -> AnswerOptions:
        return self.request.answer
