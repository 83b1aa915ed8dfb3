"""The one object the web layer talks to: it checks a request against the limits, runs it in the
inference pool and turns the result into answers.

The parts live in their own modules: the device (``app.device``), the models (``registry``), the
limits (``limits``), the worker threads (``execution``) and tensor -> JSON (``answers``). The
models keep no per-request state (attention is returned, never stored on modules), so one
instance serves concurrent requests without a lock."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Annotated, Literal

import torch
from fastapi import Depends, Request

from app.alignment.hard import Choice
from app.config import Settings
from app.device import resolve_device
from app.nn.ablation import HeadRef as HeadTuple
from app.serving import ablation, limits
from app.serving.answers import to_response
from app.serving.execution import InferencePool
from app.serving.explain import NO_EXTRAS, Extras, add_extras, forced_prefixes
from app.serving.heads import AlignmentChoice, HeadRef
from app.serving.registry import ModelRegistry, ServedModel
from app.serving.schemas import ModelInfo, TranslationResponse
from app.translator import Translation


class ModelService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.device: torch.device = resolve_device(settings.device)
        self.registry = ModelRegistry(
            settings.models_dir, self.device, settings.max_tokens, quantize=settings.quantize
        )
        self.pool = InferencePool(settings.inference_threads)
        self.stopping = False

    @property
    def status(self) -> Literal["ready", "loading", "stopping"]:
        if self.stopping:
            return "stopping"
        return "ready" if self.registry.ready else "loading"

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
    ) -> list[TranslationResponse]:
        """Translate ``texts`` as one batch. ``batch`` only says how fields are named in errors
        (``texts[i]`` rather than ``text``); ``coverage_penalty`` None is the model's default;
        ``alignment`` adds a hard word alignment, ``disable_heads`` switches heads off."""
        served = self.get(model_id)
        limits.check_coverage(served, coverage_penalty)
        heads = ablation.check_disabled(served, disable_heads)
        choice = ablation.check_alignment(served, alignment)
        limits.check_batch(self.settings, texts)
        lengths = [
            limits.check_text(self.settings, served, text, ("body", "texts", i) if batch else ("body", "text"))
            for i, text in enumerate(texts)
        ]
        budget = limits.output_budget(served, lengths, max_length)

        prefixes, budget = forced_prefixes(
            served.translator, prefix, len(texts), budget, fixed=max_length is not None, cap=served.max_decode_length
        )

        def work() -> list[Translation]:
            return served.translator.translate(
                texts,
                beam_size=beam_size,
                max_length=budget,
                coverage_penalty=coverage_penalty,
                prefixes=prefixes,
                return_tree=extras.return_beam,
            )

        return await self._run(served, ablation.with_heads_off(served, heads, work), extras, choice, heads)

    async def align(
        self,
        model_id: str,
        text: str,
        target: str,
        extras: Extras = NO_EXTRAS,
        *,
        alignment: AlignmentChoice | None = None,
        disable_heads: Sequence[HeadRef] = (),
    ) -> TranslationResponse:
        served = self.get(model_id)
        limits.check_text(self.settings, served, text, ("body", "text"))
        limits.check_text(self.settings, served, target, ("body", "target"), empty_ok=True)
        heads = ablation.check_disabled(served, disable_heads)
        choice = ablation.check_alignment(served, alignment)

        def work() -> list[Translation]:
            return served.translator.align([text], [target])

        work = ablation.with_heads_off(served, heads, work)
        return (await self._run(served, work, extras, choice, heads, targets=[target]))[0]

    async def _run(
        self,
        served: ServedModel,
        work: Callable[[], list[Translation]],
        extras: Extras = NO_EXTRAS,
        choice: Choice | None = None,
        heads: Sequence[HeadTuple] = (),
        targets: list[str] | None = None,
    ) -> list[TranslationResponse]:
        """Run ``work`` and build the answers (with any ``extras`` asked for) in a decode slot;
        ``choice``: add a hard word alignment (against ``targets``, default each output text);
        ``heads``: echoed as switched off."""
        echoed = [HeadRef(kind=k, layer=la, head=h) for k, la, h in heads]  # type: ignore[arg-type]

        def job() -> list[TranslationResponse]:
            started = time.perf_counter()
            results = work()
            answers = [to_response(served.loaded, r) for r in results]
            for k, (answer, result) in enumerate(zip(answers, results, strict=True)):
                add_extras(answer, served.loaded, result, extras)
                answer.disabled_heads = echoed
                target = result.text if targets is None else targets[k]
                ablation.add_alignment(served, answer, result, choice, result.source_text, target)
            elapsed = (time.perf_counter() - started) * 1000.0
            for answer in answers:
                answer.timing_ms = round(elapsed, 3)
            return answers

        return await self.pool.decode(job)


def get_service(request: Request) -> ModelService:
    """The app's service (made by ``create_app``, loaded by the lifespan); a FastAPI dependency."""
    service: ModelService = request.app.state.service
    return service


ServiceDep = Annotated[ModelService, Depends(get_service)]
