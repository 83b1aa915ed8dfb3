"""The one object the web layer talks to: it checks a request against the limits, queues it for a
decode slot (where concurrent requests with equal settings share one batch) and turns the
result into answers.

The parts live in their own modules: the device (``app.device``), the models (``registry``), the
limits and admission (``limits``), the worker threads (``execution``), micro-batching and the
queue (``batching``) and tensor -> JSON (``answers``). The models keep no per-request state
(attention is returned, never stored on modules), so one instance serves concurrent requests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal, TypeVar

import torch
from fastapi import Depends, Request

from app.alignment.hard import Choice
from app.alignment.rows import Rows
from app.config import Settings
from app.decoding.steps import StepCallback
from app.device import resolve_device
from app.nn.ablation import HeadRef as HeadTuple
from app.nn.ablation import disabled_heads
from app.serving import ablation, limits
from app.serving.answers import to_response
from app.serving.batching import Scheduler, Ticket
from app.serving.errors import InvalidInput
from app.serving.execution import InferencePool
from app.serving.explain import NO_EXTRAS, Extras, add_extras, forced_prefixes
from app.serving.heads import AlignmentChoice, HeadRef
from app.serving.registry import ModelRegistry, ServedModel
from app.serving.schemas import AttentionKind, ModelInfo, ProtectedSpan, TranslationResponse
from app.text.protect import Placement
from app.translator import Translation

T = TypeVar("T")


@dataclass(frozen=True)
class AnswerOptions:
    """What each answer holds: the attention kinds (None: all the model has) and decimals."""

    kinds: tuple[AttentionKind, ...] | None = None
    decimals: int = 6

    @property
    def weights(self) -> bool:
        """Whether the decode needs to record attention at all."""
        return self.kinds is None or len(self.kinds) > 0


@dataclass(frozen=True)
class TranslateKey:
    """Requests decode together only when all of these are equal. A new decoding option that
    changes the search (not just the answer) belongs here."""

    model: str
    beam_size: int
    weights: bool
    coverage_penalty: float | None = None
    return_tree: bool = False
    disabled: tuple[HeadTuple, ...] = ()  # heads switched off change the decode itself
    protect: bool = False  # placeholders change what is decoded
    stream: int = 0  # a streamed request (its ticket's id) decodes alone: its steps are its own
    languages: tuple[str | None, str | None] = (None, None)  # source_lang, target_lang (None: the card's)


@dataclass(frozen=True)
class AlignKey:
    model: str
    disabled: tuple[HeadTuple, ...] = ()


class ModelService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.device: torch.device = resolve_device(settings.device)
        self.registry = ModelRegistry(
            settings.models_dir, self.device, settings.max_tokens, quantize=settings.quantize
        )
        self.pool = InferencePool(settings.inference_threads)
        self.scheduler = Scheduler(
            self.pool.decoder,
            slots=settings.inference_threads,
            max_queue=settings.max_queue,
            window_s=settings.batch_window_ms / 1000.0,
            max_texts=settings.max_batch_texts,
            parallel_texts=settings.parallel_batch_texts,
            batch_limit=limits.batch_limit(settings),
        )
        self.stopping = False

    @property
    def status(self) -> Literal["ready", "loading", "stopping"]:
        if self.stopping:
            return "stopping"
        return "ready" if self.registry.ready else "loading"

    def stop(self) -> None:
        """Shutting down: refuse new decodes and stop the running ones at their next step."""
        self.stopping = True
        self.registry.stop_loading()
        self.scheduler.close()
        self.pool.shutdown()

    # -- the registry, for the routes ----------------------------------------------------

    def load_all(self) -> None:
        self.registry.load_all()

    @property
    def ids(self) -> list[str]:
        return self.registry.ids

    def get(self, model_id: str) -> ServedModel:
        return self.registry.get(model_id)

    def describe(self) -> list[ModelInfo]:
        return self.registry.describe()

    # -- inference ----------------------------------------------------------------------

    async def translate(
        self,
        model_id: str,
        texts: list[str],
        *,
        beam_size: int,
        max_length: int | None,
        batch: bool,
        coverage_penalty: float | None = None,
        prefix: str | None = None,
        extras: Extras = NO_EXTRAS,
        alignment: AlignmentChoice | None = None,
        disable_heads: Sequence[HeadRef] = (),
        options: AnswerOptions = AnswerOptions(),  # noqa: B008 - frozen, so one shared default is safe
        gone: threading.Event | None = None,
        log: dict[str, Any] | None = None,
        protect: bool | None = None,
        on_step: StepCallback | None = None,
        languages: tuple[str | None, str | None] = (None, None),
    ) -> list[TranslationResponse]:
        """Translate ``texts`` (one request, decoded together; each text has its own output budget,
        ``max_length`` or the default for its length, so it translates as it would alone). ``batch``
        only says how fields are named in errors (``texts[i]`` rather than ``text``);
        ``coverage_penalty`` None is the model's default; ``alignment`` adds a hard word alignment,
        ``disable_heads`` switches heads off; ``gone`` is set when the client disconnects; ``log``
        receives what the request log line reports; ``protect`` copies numbers, names, emoji and
        links through placeholders (``Translator.translate_protected``); None is the model's
        default (:func:`resolve_protect`), except for a stream; ``languages`` the request's
        source_lang and target_lang (a multilingual import's; None: the card's); ``on_step`` (one text only) hears
        each decoder step, in the decode's thread, and makes the request decode alone
        (``app.serving.stream``): a stream shows the search itself, so it never protects unless
        asked, and asked it is a 422."""
        if protect and (prefix is not None or extras.return_beam):
            loc = ("body", "prefix") if prefix is not None else ("body", "return_beam")
            raise InvalidInput(loc, "cannot be combined with protect: the shown output is scored, not searched")
        if protect and on_step is not None:
            raise InvalidInput(("body", "protect"), "cannot be streamed: the output shown is scored after the search")
        served = self.get(model_id)
        check_languages(served, languages)
        if on_step is not None:
            protect = False  # the steps streamed are the search's own: nothing is scored after it
        protect = resolve_protect(served, protect, texts, prefix=prefix, return_beam=extras.return_beam)
        if protect and extras.return_beam:  # the tree searched the masked text: not the output shown
            extras = replace(extras, return_beam=False)
        limits.check_coverage(served, coverage_penalty)
        heads = ablation.check_disabled(served, disable_heads)
        choice = ablation.check_alignment(served, alignment)
        limits.check_batch(self.settings, texts)
        lengths = [
            limits.check_text(self.settings, served, text, ("body", "texts", i) if batch else ("body", "text"))
            for i, text in enumerate(texts)
        ]
        budgets = limits.output_budgets(served, lengths, max_length)
        prefixes, budgets = forced_prefixes(
            served.translator, prefix, budgets, fixed=max_length is not None, cap=served.max_decode_length
        )
        if log is not None:
            log.update(model=model_id, tokens=sum(lengths), beams=beam_size)
        asked = limits.Asked(options.kinds, options.decimals, extras, beam_size)
        cost = limits.admission(self.settings, served, lengths, budgets, asked)
        limits.admit_explain(self.settings, served, lengths, budgets, methods=extras.explain)
        ticket = self._ticket(
            texts, budgets, options, gone, extras=extras, choice=choice, prefixes=prefixes or [[] for _ in texts],
            on_step=on_step,
        )
        ticket.cost = cost
        weights = options.weights or protect  # placing the spans reads the attention
        stream = 0 if on_step is None else id(ticket)
        key = TranslateKey(
            model_id, beam_size, weights, coverage_penalty, extras.return_beam, tuple(heads), protect, stream, languages
        )
        answers: list[TranslationResponse] = await self.scheduler.submit(key, ticket, self._run_translate)
        return answers

    async def align(
        self,
        model_id: str,
        text: str,
        target: str,
        extras: Extras = NO_EXTRAS,
        *,
        alignment: AlignmentChoice | None = None,
        disable_heads: Sequence[HeadRef] = (),
        options: AnswerOptions = AnswerOptions(),  # noqa: B008
        gone: threading.Event | None = None,
        log: dict[str, Any] | None = None,
    ) -> TranslationResponse:
        served = self.get(model_id)
        n = limits.check_text(self.settings, served, text, ("body", "text"))
        m = limits.check_text(self.settings, served, target, ("body", "target"), empty_ok=True)
        limits.admit_explain(self.settings, served, [n], [m], methods=extras.explain)
        heads = ablation.check_disabled(served, disable_heads)
        choice = ablation.check_alignment(served, alignment)
        if log is not None:
            log.update(model=model_id, tokens=n, beams=0)
        # Teacher-forced: one beam, the target (with EOS) as the output, under the same costs
        cost = limits.admission(self.settings, served, [n], [m], limits.Asked(options.kinds, options.decimals, extras))
        ticket = self._ticket([text], [0], options, gone, targets=[target], extras=extras, choice=choice)
        ticket.cost = cost
        key = AlignKey(model_id, tuple(heads))
        answers: list[TranslationResponse] = await self.scheduler.submit(key, ticket, self._run_align)
        return answers[0]

    async def run_alone(self, job: Callable[[], T], *, gone: threading.Event | None = None) -> T:
        """Run ``job`` in a decode slot of its own (under inference mode): the queue bound, the
        deadline and shutdown apply as to a translation, but it is never batched with others."""
        return await self.run_stoppable(lambda should_stop: job(), gone=gone)

    async def run_stoppable(self, job: Callable[[Callable[[], bool]], T], *, gone: threading.Event | None = None) -> T:
        """:meth:`run_alone` for a ``job`` that takes ``should_stop`` (True once the deadline has
        passed, the client has left or the server shuts down) and raises
        :class:`~app.decoding.DecodeStopped` when it says so: the slot frees up at once."""
        ticket = self._ticket([], [], AnswerOptions(), gone)

        def runner(key: Hashable, tickets: list[Ticket], should_stop: Callable[[], bool]) -> list[T]:
            with torch.inference_mode():
                return [job(should_stop)]

        result: T = await self.scheduler.submit(("alone", id(ticket)), ticket, runner)
        return result

    def _ticket(
        self,
        texts: list[str],
        budgets: list[int],
        options: AnswerOptions,
        gone: threading.Event | None,
        **payload: Any,
    ) -> Ticket:
        timeout = self.settings.request_timeout_s
        return Ticket(
            texts=texts,
            budgets=budgets,
            deadline=time.monotonic() + timeout,
            timeout_s=timeout,
            payload={"options": options, "extras": NO_EXTRAS, "choice": None, "targets": None, **payload},
            gone=gone or threading.Event(),
        )

    # -- runners: in a decode slot's thread, one call per (micro-)batch --------------------

    def _run_translate(
        self, key: Hashable, tickets: list[Ticket], should_stop: Callable[[], bool]
    ) -> list[list[TranslationResponse]]:
        assert isinstance(key, TranslateKey)
        served = self.get(key.model)
        translator = served.translator.for_languages(*key.languages)

        prefixes = [p for ticket in tickets for p in ticket.payload["prefixes"]]
        texts = [text for ticket in tickets for text in ticket.texts]
        budgets = [budget for ticket in tickets for budget in ticket.budgets]

        placed: list[list[Placement]] = []

        def decode() -> list[Translation]:
            if key.protect:
                out = translator.translate_protected(
                    texts,
                    beam_size=key.beam_size,
                    max_length=budgets,
                    coverage_penalty=key.coverage_penalty,
                    should_stop=should_stop,
                )
                placed.extend(r.placements for r in out)
                return [r.translation for r in out]
            return translator.translate(
                texts,
                beam_size=key.beam_size,
                max_length=budgets,
                need_weights=key.weights,
                coverage_penalty=key.coverage_penalty,
                prefixes=prefixes if any(prefixes) else None,
                return_tree=key.return_tree,
                should_stop=should_stop,
                on_step=tickets[0].payload["on_step"] if key.stream else None,
            )

        answers = _answer(served, tickets, decode, key.disabled)
        if key.protect:
            flat = (answer for group in answers for answer in group)
            for answer, spans in zip(flat, placed, strict=True):
                answer.protected = [
                    ProtectedSpan(
                        text=p.text, kind=p.kind, placed=p.how,  # type: ignore[arg-type]
                        source_start=p.source_start, source_end=p.source_end,
                        target_start=p.target_start, target_end=p.target_end,
                    )
                    for p in spans
                ]
        return answers

    def _run_align(
        self, key: Hashable, tickets: list[Ticket], should_stop: Callable[[], bool]
    ) -> list[list[TranslationResponse]]:
        assert isinstance(key, AlignKey)
        served = self.get(key.model)
        texts = [text for ticket in tickets for text in ticket.texts]
        targets = [target for ticket in tickets for target in ticket.payload["targets"]]

        def score() -> list[Translation]:
            return served.translator.align(texts, targets)

        return _answer(served, tickets, score, key.disabled)


def check_languages(served: ServedModel, languages: tuple[str | None, str | None]) -> None:
    """InvalidInput (422) naming the field and the valid codes for a language the model does not
    know, or any language given to a model without language codes."""
    for i, field in enumerate(("source_lang", "target_lang")):
        pair = (languages[0], None) if i == 0 else (None, languages[1])
        if pair[i] is None:
            continue
        try:
            served.translator.for_languages(*pair)
        except ValueError as err:
            raise InvalidInput(("body", field), str(err)) from None


def resolve_protect(
    served: ServedModel, protect: bool | None, texts: Sequence[str], *, prefix: str | None, return_beam: bool
) -> bool:
    """Whether a translate request goes through placeholders: as asked, else the model's default
    (``Translator.protects_by_default``), which a ``prefix`` (a what-if on the output) turns off,
    and which, with ``return_beam``, applies only when a text has something to protect (else the
    tree of the plain search is returned as asked)."""
    if protect is not None:
        return protect
    if prefix is not None or not served.translator.protects_by_default:
        return False
    return not return_beam or any(served.translator.spans(text) for text in texts)


def _answer(
    served: ServedModel,
    tickets: list[Ticket],
    run: Callable[[], list[Translation]],
    disabled: Sequence[HeadTuple] = (),
) -> list[list[TranslationResponse]]:
    """Run the decode of every ticket's texts (one batch) and build each ticket's answers with its options
    (attention kinds, decimals, extras, a word alignment against its target or its output);
    ``timing_ms`` is the whole batch's time. The ``disabled`` heads stay off for the decode *and*
    the extras' second pass (scores, alternatives), so both describe the same model."""
    echoed = [HeadRef(kind=k, layer=la, head=h) for k, la, h in disabled]  # type: ignore[arg-type]
    started = time.perf_counter()
    with torch.inference_mode(), disabled_heads(served.loaded.model, list(disabled)):
        results = iter(run())
        answers = []
        for ticket in tickets:
            options: AnswerOptions = ticket.payload["options"]
            choice: tuple[Choice, Rows] | None = ticket.payload["choice"]
            targets: list[str] | None = ticket.payload["targets"]
            group = []
            for i in range(len(ticket.texts)):
                result = next(results)
                answer = to_response(served.loaded, result, kinds=options.kinds, decimals=options.decimals)
                add_extras(answer, served.loaded, result, ticket.payload["extras"], options.decimals)
                answer.disabled_heads = echoed
                target = result.text if targets is None else targets[i]
                ablation.add_alignment(served, answer, result, choice, result.source_text, target)
                group.append(answer)
            answers.append(group)
    elapsed = round((time.perf_counter() - started) * 1000.0, 3)
    for group in answers:
        for answer in group:
            answer.timing_ms = elapsed
    return answers


async def get_service(request: Request) -> ModelService:
    """The app's service (made by ``create_app``, loaded by the lifespan); a FastAPI dependency.
    ``async``, because FastAPI runs a plain function dependency in its thread pool: a thread hop
    per request, and a wait for a free thread when the pool is busy."""
    service: ModelService = request.app.state.service
    return service


ServiceDep = Annotated[ModelService, Depends(get_service)]
