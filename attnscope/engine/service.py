"""The one object the web layer talks to: it checks a request against the limits, queues it for a
decode slot (where concurrent requests with equal settings share one batch) and turns the
result into answers.

The parts live in their own modules: the device (``attnscope.device``), the models (``registry``), the
limits and admission (``limits``), the worker threads (``execution``), micro-batching and the
queue (``batching``) and tensor -> JSON (``answers``). The models keep no per-request state
(attention is returned, never stored on modules), so one instance serves concurrent requests."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any, Literal, TypeVar

import torch

from attnscope.config import Settings
from attnscope.decoding.steps import StepCallback
from attnscope.device import resolve_device
from attnscope.engine import ablation, limits
from attnscope.engine.answer_builder import answer_batch
from attnscope.engine.attention_store import AttentionStore, stored_bytes
from attnscope.engine.batching import RATE_MIN_WORK, BatchRunner, Scheduler, Ticket
from attnscope.engine.errors import InvalidInput
from attnscope.engine.execution import InferencePool
from attnscope.engine.explain import forced_prefixes
from attnscope.engine.limits import Cost
from attnscope.engine.registry import ModelRegistry, ServedModel
from attnscope.engine.request import AlignKey, AnswerOptions, Job, ServiceRequest, TranslateKey
from attnscope.engine.schemas import ModelInfo, TranslationResponse
from attnscope.engine.stream_flow import admit_stream, stored_step_bytes
from attnscope.text.protect import Placement
from attnscope.translator import Translation

__all__ = ["AnswerOptions", "ModelService", "ServiceRequest", "resolve_protect"]

T = TypeVar("T")
logger = logging.getLogger(__name__)
# The decode that sets admission's rate at start-up: the digit string at beam 8, 8.6 M
# units of work on the shipped en-de Transformer (~0.3 s quiet, ~1.1 s at load 8, one thread).
CALIBRATION = {"digits": 95, "beams": 8, "max_length": 150}


class ModelService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.device: torch.device = resolve_device(settings.device)
        self.registry = ModelRegistry(
            settings.models_dir, self.device, settings.max_tokens, quantize=settings.quantize,
            max_loaded=settings.max_loaded_models, added_dir=settings.added_models_dir,
            max_loaded_bytes=settings.max_loaded_bytes,
        )  # fmt: skip
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
        self.attention_store = AttentionStore(settings.attention_store_bytes, settings.attention_store_seconds)
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
        self.calibrate()

    def calibrate(self) -> None:
        """Time one large decode (the scheduler's rate unit, :data:`CALIBRATION`) on the first
        loaded model big enough for one, so admission starts from what this machine does now, not
        from a prior measured elsewhere (issue 45.2: a fresh server on a busy machine admitted
        a burst at the prior's rate, 6-50 times too fast, and answered 32 of 64 with 504)."""
        for model_id in self.ids:
            served = self.registry.residency.resident.get(model_id)
            if served is None or not served.loaded.config.attention_kinds:
                continue
            text = " ".join(str(i % 10) for i in range(CALIBRATION["digits"]))
            source = min(len(served.loaded.tokenizer.encode(text)), served.max_source_tokens) + 1
            beams, length = CALIBRATION["beams"], CALIBRATION["max_length"]
            work = limits.attention_floats(served.loaded.config, [source], [length], beams)
            if work < RATE_MIN_WORK:
                continue
            started = time.monotonic()
            try:
                with torch.inference_mode():
                    served.translator.translate([text], beam_size=beams, max_length=length)
            except Exception as err:  # noqa: BLE001 - a rate is an estimate: serve with the prior
                logger.warning("could not time a decode for admission's rate (%s); keeping the prior", err)
                return
            seconds = time.monotonic() - started
            self.scheduler.calibrate(seconds, work)
            logger.info("admission's rate: %.2e s per unit of work (%s, %.2f s for %.1f M)", seconds / work, model_id, seconds, work / 1e6)
            return

    @property
    def ids(self) -> list[str]:
        return self.registry.ids

    def get(self, model_id: str) -> ServedModel:
        return self.registry.get(model_id)

    def holding(self, model_id: str) -> AbstractAsyncContextManager[ServedModel]:
        """The model, loaded if needed (waiting up to the request timeout) and kept loaded until
        the block ends: a route's whole request (``ModelRegistry.holding``)."""
        return self.registry.holding(model_id, self.settings.request_timeout_s)

    def describe(self) -> list[ModelInfo]:
        return self.registry.describe()

    # -- inference ----------------------------------------------------------------------

    async def translate(
        self,
        request: ServiceRequest,
        *,
        gone: threading.Event | None = None,
        log: dict[str, Any] | None = None,
        on_step: StepCallback | None = None,
    ) -> list[TranslationResponse]:
        """Translate the request's texts (decoded together; each text has its own output budget,
        ``max_length`` or the default for its length, so it translates as it would alone).
        ``gone`` is set when the client disconnects; ``log`` receives what the request log line
        reports; ``on_step`` (one text only) hears each decoder step, in the decode's thread, and
        makes the request decode alone (``attnscope.serving.stream``): a stream shows the search
        itself, so it never protects unless asked, and asked it is a 422. ``protect`` copies
        numbers, names, emoji and links through placeholders
        (``Translator.translate_protected``); None is the model's default
        (:func:`resolve_protect`). ``request.languages``: a multilingual import's source_lang and
        target_lang (None: the card's); 422 naming the valid codes otherwise."""
        _check_protect(request, streamed=on_step is not None)
        async with self.holding(request.model) as served:  # loaded if needed, kept while queued
            return await self._translate(served, request, gone=gone, log=log, on_step=on_step)

    async def _translate(
        self,
        served: ServedModel,
        request: ServiceRequest,
        *,
        gone: threading.Event | None,
        log: dict[str, Any] | None,
        on_step: StepCallback | None,
    ) -> list[TranslationResponse]:
        wanted = False if on_step is not None else request.protect  # the steps streamed are the search's own
        protect = resolve_protect(served, wanted, request.texts, prefix=request.prefix, return_beam=request.extras.return_beam)
        extras = replace(request.extras, return_beam=False) if protect else request.extras
        check_languages(served, request.languages)
        limits.check_coverage(served, request.coverage_penalty)
        heads = ablation.check_disabled(served, request.disable_heads)
        choice = ablation.check_alignment(served, request.alignment)
        limits.check_batch(self.settings, list(request.texts))
        lengths = [
            limits.check_text(self.settings, served, text, ("body", "texts", i) if request.batch else ("body", "text"))
            for i, text in enumerate(request.texts)
        ]
        budgets = limits.output_budgets(served, lengths, request.max_length)
        prefixes, budgets = forced_prefixes(
            served.translator, request.prefix, budgets, fixed=request.max_length is not None, cap=served.max_decode_length
        )
        if log is not None:
            log.update(model=request.model, tokens=sum(lengths), beams=request.beam_size)
        options = request.answer
        asked = limits.Asked(options.kinds, options.decimals, extras, request.beam_size)
        cost = self._admit_stored(served, lengths, budgets, asked, on_demand=options.on_demand, stream=on_step is not None)
        if on_step is not None:  # a stream: its step events (beam rows × steps) are priced too
            cost = admit_stream(self.settings, served, lengths[0], budgets[0], asked, cost)
        limits.admit_explain(self.settings, served, lengths, budgets, methods=extras.explain)
        rows = tuple(tuple(p) for p in prefixes or [[] for _ in request.texts])
        job = Job(request, extras, rows, choice, on_step, store=self.attention_store if options.on_demand else None)
        ticket = self._ticket(list(request.texts), budgets, job, gone, cost)
        weights = options.weights or protect  # placing the spans reads the attention
        stream = 0 if on_step is None else id(ticket)
        key = TranslateKey(
            request.model, request.decode_options(weights=weights), tuple(heads), protect, stream, request.languages
        )
        answers: list[TranslationResponse] = await self.scheduler.submit(
            key, ticket, self._pinned(self._run_translate)
        )
        return answers

    async def align(
        self, request: ServiceRequest, *, gone: threading.Event | None = None, log: dict[str, Any] | None = None
    ) -> TranslationResponse:
        """Teacher-force the model on ``request.target`` as the translation of its one text."""
        async with self.holding(request.model) as served:  # loaded if needed, kept while queued
            return await self._align(served, request, gone=gone, log=log)

    async def _align(
        self, served: ServedModel, request: ServiceRequest, *, gone: threading.Event | None, log: dict[str, Any] | None
    ) -> TranslationResponse:
        (text,), target = request.texts, request.target or ""
        n = limits.check_text(self.settings, served, text, ("body", "text"))
        m = limits.check_text(self.settings, served, target, ("body", "target"), empty_ok=True)
        extras, options = request.extras, request.answer
        limits.admit_explain(self.settings, served, [n], [m], methods=extras.explain)
        heads = ablation.check_disabled(served, request.disable_heads)
        choice = ablation.check_alignment(served, request.alignment)
        if log is not None:
            log.update(model=request.model, tokens=n, beams=0)
        # Teacher-forced: one beam, the target (with EOS) as the output, under the same costs
        asked = limits.Asked(options.kinds, options.decimals, extras)
        cost = self._admit_stored(served, [n], [m], asked, on_demand=options.on_demand)
        store = self.attention_store if options.on_demand else None
        ticket = self._ticket([text], [0], Job(request, extras, choice=choice, store=store), gone, cost)
        key = AlignKey(request.model, tuple(heads))
        answers: list[TranslationResponse] = await self.scheduler.submit(key, ticket, self._pinned(self._run_align))
        return answers[0]

    def _pinned(self, runner: BatchRunner) -> BatchRunner:
        """``runner`` with its key's model kept loaded while it decodes (``ModelRegistry.pinned``)."""

        def run(key: Hashable, tickets: list[Any], should_stop: Any) -> list[Any]:
            with self.registry.pinned(key.model):  # type: ignore[attr-defined]
                return runner(key, tickets, should_stop)

        return run

    def _admit_stored(
        self, served: ServedModel, lengths: list[int], budgets: list[int], asked: limits.Asked, *, on_demand: bool,
        stream: bool = False,
    ) -> Cost:
        """:func:`limits.admission`; on demand, the answer holds no matrices, but the decode keeps
        every kind and the store must be able to hold them (422 naming the store's bound); a
        stream's steps are kept too (``stored_step_bytes``: every beam row of every step)."""
        cost = limits.admission(self.settings, served, lengths, budgets, asked)
        if not on_demand:
            return cost
        floats = limits.admit(self.settings, served, lengths, budgets, beams=asked.beams, weights=True)
        need, bound = stored_bytes(served.loaded.config, lengths, budgets), self.attention_store.max_bytes
        if stream:
            need += stored_step_bytes(served.loaded.config, lengths[0], budgets[0], asked.beams)
        if need > bound:
            raise InvalidInput(
                ("body", "attention"),
                f"on demand, this decode's attention could take up to {need / 1e6:.1f} MB, more than the whole "
                f"attention store holds ({bound / 1e6:g} MB, ATTNSCOPE_ATTENTION_STORE_BYTES); ask for a shorter "
                "max_length, fewer texts or a shorter text",
                kind="store_limit",
            )
        return replace(cost, floats=floats)

    async def run_alone(
        self, job: Callable[[], T], *, gone: threading.Event | None = None, cost: Cost = Cost()  # noqa: B008
    ) -> T:
        """Run ``job`` in a decode slot of its own (under inference mode): the queue bound, the
        deadline and shutdown apply as to a translation, but it is never batched with others.
        ``cost``: its price (:func:`attnscope.engine.route_prices.price_route`), which the
        scheduler weighs to refuse with 503 what cannot finish before the deadline."""
        return await self.run_stoppable(lambda should_stop: job(), gone=gone, cost=cost)

    async def run_stoppable(
        self, job: Callable[[Callable[[], bool]], T], *, gone: threading.Event | None = None, cost: Cost = Cost()  # noqa: B008
    ) -> T:
        """:meth:`run_alone` for a ``job`` that takes ``should_stop`` (True once the deadline has
        passed, the client has left or the server shuts down) and raises
        :class:`~attnscope.decoding.DecodeStopped` when it says so: the slot frees up at once."""
        ticket = self._ticket([], [], None, gone, cost)

        def runner(key: Hashable, tickets: list[Ticket], should_stop: Callable[[], bool]) -> list[T]:
            with torch.inference_mode():
                return [job(should_stop)]

        result: T = await self.scheduler.submit(("alone", id(ticket)), ticket, runner)
        return result

    def _ticket(
        self, texts: list[str], budgets: list[int], job: Job | None, gone: threading.Event | None, cost: Cost = Cost()  # noqa: B008
    ) -> Ticket:
        timeout = self.settings.request_timeout_s
        return Ticket(
            texts=texts,
            budgets=budgets,
            deadline=time.monotonic() + timeout,
            timeout_s=timeout,
            payload=job,
            gone=gone or threading.Event(),
            cost=cost,
        )

    # -- runners: in a decode slot's thread, one call per (micro-)batch --------------------

    def _run_translate(
        self, key: Hashable, tickets: list[Ticket], should_stop: Callable[[], bool]
    ) -> list[list[TranslationResponse]]:
        assert isinstance(key, TranslateKey)
        served = self.get(key.model)
        translator = served.translator.for_languages(*key.languages)
        texts = [text for ticket in tickets for text in ticket.texts]
        prefixes = [p for ticket in tickets for p in ticket.payload.prefixes]
        options = replace(
            key.decode,
            max_length=[budget for ticket in tickets for budget in ticket.budgets],
            prefix=prefixes if any(prefixes) else None,
        )

        def decode() -> tuple[list[Translation], list[list[Placement]] | None]:
            if key.protect:
                out = translator.translate_protected(texts, options, should_stop=should_stop)
                return [r.translation for r in out], [r.placements for r in out]
            on_step = tickets[0].payload.on_step if key.stream else None
            return translator.translate(texts, options, should_stop=should_stop, on_step=on_step), None

        return answer_batch(served, tickets, decode, key.disabled)

    def _run_align(
        self, key: Hashable, tickets: list[Ticket], should_stop: Callable[[], bool]
    ) -> list[list[TranslationResponse]]:
        assert isinstance(key, AlignKey)
        served = self.get(key.model)
        texts = [text for ticket in tickets for text in ticket.texts]
        targets = [ticket.payload.request.target or "" for ticket in tickets]
        return answer_batch(served, tickets, lambda: (served.translator.align(texts, targets), None), key.disabled)


def _check_protect(request: ServiceRequest, *, streamed: bool) -> None:
    """InvalidInput (422) where protect is asked with what it cannot give: a prefix or the beam
    tree (the output shown is scored, not searched), or a stream (the output is scored after the
    search)."""
    forcing = request.prefix is not None and bool(request.prefix.strip())  # a blank prefix forces nothing
    if request.protect and (forcing or request.extras.return_beam):
        loc = ("body", "prefix") if forcing else ("body", "return_beam")
        raise InvalidInput(loc, "cannot be combined with protect: the shown output is scored, not searched")
    if request.protect and streamed:
        raise InvalidInput(("body", "protect"), "cannot be streamed: the output shown is scored after the search")


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
