"""The one object the web layer talks to: the loaded models, their translators and the device.

Inference runs in a worker thread (``anyio.to_thread``) under ``torch.inference_mode()``, so
the event loop keeps serving. The models keep no per-request state (attention is returned,
never stored on modules), so one instance serves concurrent requests without a lock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar, cast

import anyio.to_thread
import torch
from fastapi import Depends, Request

from app.config import Settings
from app.decoding.output import max_target_length
from app.nn.config import EOS_ID, TransformerConfig, score_of
from app.repository import LoadedModel, discover, load_model_folder
from app.serving.errors import InvalidInput, Loc, UnknownModel
from app.serving.schemas import AttentionKind, Matrix, ModelInfo, TranslationResponse, Word
from app.text.pieces import UNK_PIECE, render_pieces
from app.text.tokenizer import BOS_PIECE, EOS_PIECE, group_words
from app.translator import Translation, Translator

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The decoders' default output budget: ratio × longest source (with EOS) + offset tokens.
BUDGET_RATIO, BUDGET_OFFSET = 1.5, 10


def resolve_device(name: str | None) -> torch.device:
    """``None`` -> cuda when available, else cpu. ValueError for a name torch does not know or a
    CUDA device this machine does not have."""
    if name is None:
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"unknown device {name!r}: {err}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} requested but CUDA is not available")
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r} requested but there are {torch.cuda.device_count()} GPUs")
        device = torch.device("cuda", index)
    return device


@dataclass
class ServedModel:
    """A loaded model with its translator and the limits its positional range allows."""

    loaded: LoadedModel
    translator: Translator
    max_source_tokens: int  # without EOS
    max_decode_length: int | None  # None: no positional limit

    def info(self, device: torch.device) -> ModelInfo:
        c, card = self.loaded.config, self.loaded.card
        bleu = card.get("bleu")
        return ModelInfo(
            id=self.loaded.id,
            architecture=c.architecture,
            score=score_of(c),
            source_lang=self.loaded.source_lang,
            target_lang=self.loaded.target_lang,
            layers=c.layers,
            encoder_layers=c.encoder_layers if isinstance(c, TransformerConfig) else 1,
            heads=c.num_heads,
            parameters=self.loaded.model.num_parameters,
            attention=list(c.attention_kinds),  # type: ignore[arg-type]
            bleu=bleu if isinstance(bleu, dict | float | int) and not isinstance(bleu, bool) else None,
            device=str(device),
            card={k: v for k, v in card.items() if v is None or isinstance(v, str | int | float | bool)},
        )


def serve_model(loaded: LoadedModel, max_tokens: int) -> ServedModel:
    c = loaded.config
    limit, decode = max_tokens, None
    if isinstance(c, TransformerConfig):
        limit, decode = min(limit, c.max_positions - 1), c.max_positions
    elif c.score == "location":  # predicts a position among max_source_positions
        limit = min(limit, c.max_source_positions - 1)
    return ServedModel(loaded, Translator(loaded, max_source_tokens=limit), limit, decode)


class ModelService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.device = resolve_device(settings.device)
        self._models: dict[str, ServedModel] = {}

    # -- loading and lookup -------------------------------------------------------------

    def load_all(self) -> None:
        """Load every model folder; a folder that fails is logged with the reason and left out."""
        root = self.settings.models_dir
        if not root.is_dir():
            logger.warning("models directory %s does not exist; serving no models", root)
        for folder in discover(root):
            started = time.perf_counter()
            try:
                loaded = load_model_folder(folder, device=self.device)
            except Exception as err:  # noqa: BLE001 - any broken folder is skipped, never fatal
                logger.error("skipping model folder %s: %s", folder, err)
                continue
            self._models[loaded.id] = serve_model(loaded, self.settings.max_tokens)
            logger.info(
                "loaded %s (%s, %d parameters) on %s in %.1f s",
                loaded.id,
                loaded.config.architecture,
                loaded.model.num_parameters,
                self.device,
                time.perf_counter() - started,
            )
        logger.info("serving %d model(s) from %s on %s", len(self._models), root, self.device)

    @property
    def ids(self) -> list[str]:
        return list(self._models)

    def get(self, model_id: str) -> ServedModel:
        try:
            return self._models[model_id]
        except KeyError:
            raise UnknownModel(model_id, self.ids) from None

    def describe(self) -> list[ModelInfo]:
        return [served.info(self.device) for served in self._models.values()]

    # -- inference ----------------------------------------------------------------------

    async def translate(
        self, model_id: str, texts: list[str], *, beam_size: int, max_length: int | None, batch: bool
    ) -> list[TranslationResponse]:
        """Translate ``texts`` as one batch. ``batch`` only says how fields are named in errors
        (``texts[i]`` rather than ``text``)."""
        served = self.get(model_id)
        if len(texts) > self.settings.max_batch:
            raise InvalidInput(("body", "texts"), f"has {len(texts)} texts; the limit is {self.settings.max_batch}")
        lengths = [
            self._check(served, text, ("body", "texts", i) if batch else ("body", "text"))
            for i, text in enumerate(texts)
        ]
        budget = self._budget(served, lengths, max_length)

        def work() -> list[Translation]:
            return served.translator.translate(texts, beam_size=beam_size, max_length=budget)

        return await self._run(served, work)

    async def align(self, model_id: str, text: str, target: str) -> TranslationResponse:
        served = self.get(model_id)
        self._check(served, text, ("body", "text"))
        self._check(served, target, ("body", "target"), empty_ok=True)

        def work() -> list[Translation]:
            return served.translator.align([text], [target])

        return (await self._run(served, work))[0]

    def _check(self, served: ServedModel, text: str, loc: Loc, empty_ok: bool = False) -> int:
        """Enforce the character and token limits; returns the token count with EOS."""
        if len(text) > self.settings.max_chars:
            raise InvalidInput(loc, f"has {len(text)} characters; the limit is {self.settings.max_chars}")
        n = len(served.loaded.tokenizer.encode(text))
        if n == 0 and not empty_ok:
            raise InvalidInput(loc, "has no tokens (only whitespace, control or zero-width characters)")
        if n > served.max_source_tokens:
            raise InvalidInput(loc, f"has {n} tokens; the limit is {served.max_source_tokens}")
        return n + 1

    @staticmethod
    def _budget(served: ServedModel, lengths: list[int], max_length: int | None) -> int:
        cap = served.max_decode_length
        if max_length is not None:
            return max_length if cap is None else min(max_length, cap)
        return max_target_length(torch.tensor(lengths), BUDGET_RATIO, BUDGET_OFFSET, cap)

    async def _run(self, served: ServedModel, work: Callable[[], list[Translation]]) -> list[TranslationResponse]:
        """Run ``work`` and build the answers in a worker thread, under inference mode."""

        def job() -> list[TranslationResponse]:
            started = time.perf_counter()
            with torch.inference_mode():
                results = work()
                answers = [to_response(served.loaded, r) for r in results]
            elapsed = (time.perf_counter() - started) * 1000.0
            for answer in answers:
                answer.timing_ms = round(elapsed, 3)
            return answers

        return await to_thread(job)


async def to_thread(fn: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(fn)


# -- tensors -> JSON-ready answers ------------------------------------------------------


def matrix(t: torch.Tensor) -> Matrix:
    """(L, H, Q, K) attention -> nested lists rounded to 6 decimals (via float64, so 0.123457
    prints as such and not as float32's 0.12345699965953827)."""
    return cast(Matrix, t.detach().to("cpu", torch.float64).round(decimals=6).tolist())


def words(pieces: list[str], unk_spans: list[str] | None = None) -> list[Word]:
    """Pieces grouped into words, each word's text readable: byte pieces joined into their
    characters (a word never ends inside a character's bytes: only a "▁" piece opens a word),
    and each ``<unk>`` shown as the original text behind it (``unk_spans``, in order) or "⁇"."""
    spans = iter(unk_spans or [])
    shown = [next(spans, piece) if piece == UNK_PIECE else piece for piece in pieces]
    return [Word(text=render_pieces([shown[i] for i in group], marker=""), tokens=group) for group in group_words(pieces)]


def to_response(loaded: LoadedModel, result: Translation, timing_ms: float = 0.0) -> TranslationResponse:
    tok, hyp = loaded.tokenizer, result.hypothesis
    source_tokens = tok.pieces(result.source_ids)
    target_tokens = tok.pieces(result.target_ids)
    attention: dict[AttentionKind, Matrix] = {}
    for kind in cast(tuple[AttentionKind, ...], loaded.config.attention_kinds):
        weights = getattr(hyp, kind)
        if weights is not None:
            attention[kind] = matrix(weights)
    return TranslationResponse(
        model=loaded.id,
        translation=result.text,
        source_tokens=source_tokens,
        target_tokens=target_tokens,
        decoder_input_tokens=[BOS_PIECE, *target_tokens[:-1]],
        eos_token=EOS_PIECE,
        finished=bool(result.target_ids) and result.target_ids[-1] == EOS_ID,
        source_words=words(source_tokens, tok.unk_spans(result.source_text)),
        target_words=words(target_tokens),
        attention=attention,
        score=score_of(loaded.config),
        logprob=round(hyp.score, 6),
        target_logprobs=[round(x, 6) for x in hyp.token_logprobs],
        timing_ms=timing_ms,
    )


def get_service(request: Request) -> ModelService:
    """The app's service (set by the lifespan); a FastAPI dependency."""
    service: ModelService = request.app.state.service
    return service


ServiceDep = Annotated[ModelService, Depends(get_service)]
