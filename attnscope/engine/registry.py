"""The model registry: the one place the API and the pages learn which models there are.

Every folder of the models directory is loaded once (in the lifespan, off the event loop); a
folder that fails is kept as *unavailable* with the reason and the file at fault, so
``/api/models`` and the Models page can say what is wrong instead of silently leaving it out.

The loaded models live in one :class:`~attnscope.engine.residency.Residency`, whose bound is
``max_loaded`` (``ATTNSCOPE_MAX_LOADED_MODELS``) or, unset, the number of folders: unbounded is
the bound nobody reaches, not a second mode. Under a bound smaller than the folders, every folder
is only *listed* at start-up (config, tokenizer and card read, the network built on the meta
device: shapes, no weights) and the first ``bound`` are loaded; the others load on first use and
the least recently used model is unloaded beyond the bound, each listed with its state. With
room for all, every folder is loaded at start-up, ``LOAD_THREADS`` at a time, and published in
folder order as it arrives."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnscope.engine.errors import Unavailable, UnknownModel
from attnscope.engine.head_scores import CardAblation, CardAlignment, card_head_scores
from attnscope.engine.residency import LoadFailed, Residency
from attnscope.engine.schemas import ModelInfo, UnavailableModel
from attnscope.nn.config import score_of
from attnscope.nn.factory import build_model
from attnscope.nn.family import geometry_of
from attnscope.repository import (
    LoadedModel,
    MissingModelFile,
    ModelFolderError,
    ModelIdClash,
    check_complete,
    discover,
    discover_all,
    load_model_folder,
    load_tokenizer,
    read_card,
    read_config,
    required_files,
)
from attnscope.translator import Translator

logger = logging.getLogger(__name__)
LOAD_THREADS = 2  # folders loaded at once: reading weights and copying them into the model release the GIL


@dataclass
class ServedModel:
    """A loaded model with its translator and the limits its positional range allows."""

    loaded: LoadedModel
    translator: Translator
    max_source_tokens: int  # without EOS
    max_decode_length: int | None  # output tokens with EOS; None: no positional limit

    @classmethod
    def of(cls, loaded: LoadedModel, max_tokens: int) -> ServedModel:
        """Serve ``loaded`` accepting at most ``max_tokens`` source tokens (fewer when the
        model's positions run out first: its config says how many it has)."""
        limit = max_tokens
        if loaded.config.source_positions is not None:
            limit = min(limit, loaded.config.source_positions - 1)  # leave room for EOS
        translator = Translator(loaded, max_source_tokens=limit)
        return cls(loaded, translator, limit, loaded.config.target_positions)

    @property
    def id(self) -> str:
        return self.loaded.id

    @property
    def encoder_layers(self) -> int:
        return geometry_of(self.loaded.config).encoder_layers

    def head_scores(self) -> tuple[CardAlignment | None, CardAblation | None, list[str]]:
        """The card's per-head sections that fit this model, and a warning for each that does not."""
        return card_head_scores(self.loaded.card, geometry_of(self.loaded.config).shapes())

    def info(self, device: torch.device) -> ModelInfo:
        c, card = self.loaded.config, self.loaded.card
        bleu = card.get("bleu")
        alignment, ablation, head_warnings = self.head_scores()
        return ModelInfo(
            id=self.loaded.id,
            architecture=c.architecture,
            score=score_of(c),
            source_lang=self.loaded.source_lang,
            target_lang=self.loaded.target_lang,
            layers=c.layers,
            encoder_layers=self.encoder_layers,
            heads=c.num_heads,
            parameters=self.loaded.model.num_parameters,
            attention=list(c.attention_kinds),  # type: ignore[arg-type]
            bleu=bleu if isinstance(bleu, dict | float | int) and not isinstance(bleu, bool) else None,
            chrf=card["chrf"] if isinstance(card.get("chrf"), dict) else None,
            device=str(device),
            card={k: v for k, v in card.items() if v is None or isinstance(v, str | int | float | bool)},
            max_source_tokens=self.max_source_tokens,
            max_length=self.max_decode_length,
            warnings=[*self.loaded.warnings, *head_warnings],
            decoding={
                "length_penalty": self.translator.length_penalty,
                "coverage_penalty": self.translator.coverage_penalty,
            },
            protect=self.translator.protects_by_default,
            alignment=alignment,
            ablation=ablation,
        )

    def page_card(self) -> dict[str, Any]:
        """The full card for the Models page, with the facts it needs even when the card is
        partial (or missing): language pair, architecture, score, parameters."""
        c = self.loaded.config
        facts = {"architecture": c.architecture, "score": score_of(c), "parameters": self.loaded.model.num_parameters}
        alignment, ablation, head_warnings = self.head_scores()
        card = {k: v for k, v in self.loaded.card.items() if k not in ("alignment", "ablation")}
        return {
            **facts,
            **card,
            **({"alignment": self.loaded.card["alignment"]} if alignment else {}),  # only sections that fit
            **({"ablation": self.loaded.card["ablation"]} if ablation else {}),
            "id": self.loaded.id,
            "source_lang": self.loaded.source_lang,
            "target_lang": self.loaded.target_lang,
            "warnings": [*self.loaded.warnings, *head_warnings],
        }


class ModelRegistry:
    """The served models and the folders that could not be loaded, by id."""

    def __init__(
        self,
        models_dir: Path,
        device: torch.device,
        max_tokens: int,
        quantize: str | None = None,
        max_loaded: int | None = None,
        added_dir: Path | None = None,
        max_loaded_bytes: int | None = None,
    ) -> None:
        self.models_dir = models_dir
        # the repositories served: the main one, and the one `--models-dir` adds (ids unique)
        self.roots = (models_dir,) if added_dir is None else (models_dir, added_dir)
        self.folders: dict[str, Path] = {}  # model id -> its folder, once load_all has looked
        self.device = device
        self.quantize = quantize  # "int8": attnscope.nn.quantize
        self.max_tokens = max_tokens
        self.max_loaded = max_loaded  # None: room for every folder
        self._unavailable: dict[str, UnavailableModel] = {}
        self._loaded = threading.Event()
        self._stop = threading.Event()
        self.total = 0  # model folders found (0 until load_all has looked); loaded: len(ids)
        # the listed models' previews (meta weights, for the list and the pages) where the bound
        # leaves some folders unloaded; a resident model is listed as itself
        self._previews: dict[str, ServedModel] = {}
        self.residency: Residency[ServedModel] = Residency(
            max_loaded or 0, self._load_one, ServedModel, max_bytes=max_loaded_bytes
        )

    @property
    def ready(self) -> bool:
        """Whether :meth:`load_all` has finished (each folder loaded or marked unavailable)."""
        return self._loaded.is_set()

    @property
    def loaded(self) -> int:
        """How many models are loaded so far (of :attr:`total` folders found)."""
        return len(self.residency.resident)

    def stop_loading(self) -> None:
        """Make :meth:`load_all` stop before its next folders (the server is shutting down)."""
        self._stop.set()

    def load_all(self) -> None:
        """Load every model folder, ``LOAD_THREADS`` at a time, logging each one's name and
        time; publish them in folder order (:attr:`loaded` counts up); a folder that fails is
        logged and kept as unavailable. Returns soon after :meth:`stop_loading`."""
        root = ", ".join(str(r) for r in self.roots)
        for missing in (r for r in self.roots if not r.is_dir()):
            logger.warning("models directory %s does not exist; serving no models from it", missing)
        try:
            folders = discover_all(self.roots)
        except ModelIdClash as err:  # `serve` refuses this before starting; an app built otherwise
            logger.error("%s; serving %s alone", err, self.models_dir)  # keeps its main repository
            self.roots = (self.models_dir,)
            folders = discover(self.models_dir)
        self.folders = {folder.name: folder for folder in folders}
        self.total = len(folders)
        begun = time.perf_counter()
        self.residency.bound = len(folders) if self.max_loaded is None else self.max_loaded
        if self.residency.bound < len(folders) or self.residency.max_bytes is not None:
            self._list_all(folders, self.residency)
            self._loaded.set()
            return
        outcomes: list[ServedModel | UnavailableModel | None] = [None] * len(folders)
        finished = [threading.Event() for _ in folders]
        claims = itertools.count()  # next() on it is atomic: each folder is loaded once

        def work() -> None:
            while not self._stop.is_set() and (i := next(claims)) < len(folders):
                outcomes[i] = self._load_one(folders[i], i + 1)
                finished[i].set()

        workers = [threading.Thread(target=work, name=f"attnscope-load-{n}", daemon=True)
                   for n in range(min(LOAD_THREADS, len(folders)))]  # daemons: a stuck folder never holds the exit
        for worker in workers:
            worker.start()
        for i, folder in enumerate(folders):
            while not finished[i].wait(0.05):
                if self._stop.is_set():
                    logger.info("stopped loading: shutting down after %d of %d model(s)", i, self.total)
                    # let them finish the folder in hand (bounded): a daemon thread still inside
                    # torch while the interpreter exits aborts the process
                    deadline = time.monotonic() + 10.0  # the first meta-device build imports torch._dynamo
                    for worker in workers:
                        worker.join(max(0.0, deadline - time.monotonic()))
                    return
            outcome = outcomes[i]
            if isinstance(outcome, ServedModel):
                self.residency.add(folder.name, folder, outcome)
            elif outcome is not None:
                self._unavailable[folder.name] = outcome
        self._loaded.set()
        logger.info(
            "serving %d model(s) from %s on %s, loaded in %.1f s",
            len(self.residency.resident), root, self.device, time.perf_counter() - begun,
        )  # fmt: skip

    def serve_loaded(self, served: ServedModel, folder: Path) -> None:
        """Serve one model that the caller has already loaded (the Python API's ``attnscope.load``):
        the registry is then ready with exactly that model, as :meth:`load_all` would leave it."""
        self.total = 1
        self.folders = {served.id: folder}
        self.residency.bound = max(self.residency.bound, 1)
        self.residency.add(served.id, folder, served)
        self._loaded.set()

    def _list_all(self, folders: list[Path], residency: Residency[ServedModel]) -> None:
        """Bounded memory: list every folder (a preview, or unavailable), then load the first
        ``residency.bound`` of them (those that fit the byte budget), so the first requests find
        them loaded."""
        for folder in folders:
            try:
                self._previews[folder.name] = _preview(folder, self.max_tokens)
                residency.folders[folder.name] = folder
            except Exception as err:  # noqa: BLE001 - as in _load_one: reported, never fatal
                logger.error("skipping model folder %s: %s", folder.name, err)
                self._unavailable[folder.name] = _unavailable(folder, err)
        for model_id in list(residency.folders)[: residency.bound]:
            if self._stop.is_set():
                return
            if residency.resident and not residency.fits(model_id):
                break
            residency.load_now(model_id)
        logger.info(
            "listing %d model(s) from %s, at most %d loaded at once (%d loaded now)",
            len(residency.folders), self.models_dir, residency.bound, len(residency.resident),
        )  # fmt: skip

    def _load_one(self, folder: Path, index: int | None = None) -> ServedModel | UnavailableModel:
        """One folder, loaded and logged with its time; an error is logged and returned as unavailable."""
        if index is None:
            logger.info("loading %s (at most %s stay loaded) ...", folder.name, self.residency.bound)
        else:
            logger.info("loading %s (%d of %d) ...", folder.name, index, self.total)
        started = time.perf_counter()
        try:
            loaded = load_model_folder(folder, device=self.device, quantize=self.quantize)
            served = ServedModel.of(loaded, self.max_tokens)
        except Exception as err:  # noqa: BLE001 - any broken folder is reported, never fatal
            logger.error("skipping model folder %s: %s", folder.name, err)
            return _unavailable(folder, err)
        logger.info(
            "loaded %s (%s, %d parameters) on %s in %.1f s",
            loaded.id, loaded.config.architecture, loaded.model.num_parameters, self.device,
            time.perf_counter() - started,
        )  # fmt: skip
        return served

    def progress(self) -> tuple[int, int]:
        """(folders done, folders in all): done counts the loaded (or listed) and the unavailable
        ones; while loading, "all" is what the models directory holds now (a folder is a cheap stat)."""
        done = len(self.residency.folders) + len(self.residency.failures()) + len(self._unavailable)
        return done, done if self.ready else max(done, len(discover_all(self.roots)))

    @property
    def ids(self) -> list[str]:
        """The models requests may name: every listed one, in folder order (while the models
        load with room for all: the ones loaded so far)."""
        return list(self.residency.folders)

    def get(self, model_id: str) -> ServedModel:
        """The served model ``model_id``; UnknownModel (404) when there is none, Unavailable
        (503) while the models are still loading, or (bounded memory) while this one loads:
        its load starts here, and Retry-After says when to ask again."""
        if model_id in self.residency.folders:
            served = self.residency.get_now(model_id)
            if served is None:
                raise Unavailable(f"model {model_id} is loading; try again shortly", retry_after_s=2)
            return served
        if not self.ready:
            raise Unavailable("the models are still loading; see /api/ready", retry_after_s=2)
        raise UnknownModel(model_id, self.ids, self._failure(model_id))

    async def acquire(self, model_id: str, timeout_s: float) -> ServedModel:
        """:meth:`get`, but a model that is not loaded (bounded memory) is loaded and waited for
        up to ``timeout_s``, then 503 "model X is loading" with Retry-After."""
        async with self.holding(model_id, timeout_s) as served:
            return served

    @asynccontextmanager
    async def holding(self, model_id: str, timeout_s: float) -> AsyncIterator[ServedModel]:
        """:meth:`acquire`, the model kept loaded until the block ends (a request's whole life:
        queued, decoding, answered), so bounded memory never unloads it under a request."""
        if model_id not in self.residency.folders:
            yield self.get(model_id)
            return
        try:
            async with self.residency.holding(model_id, timeout_s) as served:
                yield served
        except LoadFailed:
            raise UnknownModel(model_id, self.ids, self._failure(model_id)) from None

    @contextmanager
    def pinned(self, model_id: str) -> Iterator[ServedModel]:
        """The model, kept loaded while the block runs (bounded memory: loaded in this thread
        first if it had been unloaded); call it in a decode thread, never on the event loop."""
        if model_id not in self.residency.folders:
            yield self.get(model_id)
            return
        try:
            with self.residency.pinned(model_id) as served:
                yield served
        except LoadFailed:
            raise UnknownModel(model_id, self.ids, self._failure(model_id)) from None

    def _failure(self, model_id: str) -> UnavailableModel | None:
        failed = self.residency.failed(model_id)
        return failed if isinstance(failed, UnavailableModel) else self._unavailable.get(model_id)

    def _listed(self) -> list[tuple[ServedModel, str]]:
        """Every usable model with its state: resident ones as loaded, the others' previews."""
        residency = self.residency
        return [
            (residency.resident.get(model_id) or self._previews[model_id], residency.state(model_id))
            for model_id in residency.folders
        ]

    def describe(self) -> list[ModelInfo]:
        return [served.info(self.device).model_copy(update={"state": state}) for served, state in self._listed()]

    def unavailable(self) -> list[UnavailableModel]:
        failed = self.residency.failures()  # listed, then failed to load
        later = [failed[m] for m in self._previews if isinstance(failed.get(m), UnavailableModel)]
        return [*self._unavailable.values(), *later]  # type: ignore[list-item]

    def page_cards(self) -> list[dict[str, Any]]:
        """Every model's card for the pages; an unavailable folder appears with an ``error``
        (and what its config.json and card.json still tell, where they can be read); with
        bounded memory each card says its ``state`` (loaded, loading, not_loaded)."""
        listed = self._listed()
        bounded = self.max_loaded is not None  # the pages show a state where models come and go
        cards = [{**served.page_card(), **({"state": state} if bounded else {})} for served, state in listed]
        for entry in self.unavailable():
            folder = self.folders.get(entry.id, self.models_dir / entry.id)
            cards.append({**_folder_facts(folder), "id": entry.id, "error": entry.reason})
        return cards


def _preview(folder: Path, max_tokens: int) -> ServedModel:
    """What a folder tells without its weights (bounded memory's listed models): config,
    tokenizer and card read and checked, the network built on the meta device (its shapes and
    parameter count, no memory). Its ``info`` and ``page_card`` are the loaded model's; it never decodes."""
    config, meta = read_config(folder)
    for name in required_files(folder):
        if not (folder / name).is_file():
            raise MissingModelFile(folder, name, f"missing {name}")
    check_complete(folder)  # an interrupted write is listed unavailable, never previewed
    tokenizer = load_tokenizer(folder)
    try:
        with torch.device("meta"):
            model = build_model(config)
    except Exception as err:  # noqa: BLE001 - a family whose construction computes on its tensors
        logger.warning("%s: listed from a full load (%s), its weights then dropped", folder.name, err)
        loaded = load_model_folder(folder)
        loaded.model.to("meta")  # the facts stay, the memory goes
        return ServedModel.of(loaded, max_tokens)
    card, warnings = read_card(folder)
    loaded = LoadedModel(
        id=folder.name, path=folder, config=config, model=model, tokenizer=tokenizer,
        source_lang=meta["source_lang"], target_lang=meta["target_lang"], card=card, warnings=warnings,
    )  # fmt: skip
    return ServedModel.of(loaded, max_tokens)


def _unavailable(folder: Path, err: Exception) -> UnavailableModel:
    if isinstance(err, ModelFolderError):
        reason = err.reason if err.file in err.reason else f"{err.file}: {err.reason}"
        return UnavailableModel(id=folder.name, file=err.file, reason=reason)
    return UnavailableModel(id=folder.name, file=None, reason=f"{type(err).__name__}: {err}")


def _folder_facts(folder: Path) -> dict[str, Any]:
    """What a folder that failed to load still tells: its card and its config's basic facts."""
    facts: dict[str, Any] = {}
    try:
        config, meta = read_config(folder)
        facts.update(
            architecture=config.architecture,
            score=score_of(config),
            source_lang=meta.get("source_lang"),
            target_lang=meta.get("target_lang"),
        )
    except ModelFolderError:
        pass
    card, _ = read_card(folder)
    return {**card, **facts}
