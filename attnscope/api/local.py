"""``attnscope.load()``: a model in this process, served by the same service object as the
server, so its answers are the server's answers.

A request goes the REST way without the HTTP: the options become the route's body and are
validated by its schema (:mod:`attnscope.api.requests`), the service checks the limits, queues,
decodes and builds the answer (``answer_batch``), and the server's own serialiser writes its
JSON. The service is asynchronous; its coroutines run on an event loop in a daemon thread of
this module, so the calls block, and work the same inside Jupyter's running loop."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from attnscope.api import requests
from attnscope.api.analysis import HeadAnalysis, analyze_fields
from attnscope.api.errors import ModelNotFound, entry, from_engine, unprocessable
from attnscope.api.results import AttributionResult, Result
from attnscope.api.vision import LocalVisionModel

__all__ = ["LocalLLM", "LocalModel", "load"]

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the module's event loop (started on first use) and wait for its result;
    an error the service raised comes out as the API's exception (same message as the REST)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="attnscope-api-loop", daemon=True).start()
    try:
        return asyncio.run_coroutine_threadsafe(coro, _loop).result()
    except Exception as err:  # noqa: BLE001 - re-raised as the API's own class where it has one
        converted = from_engine(err)
        if converted is err:
            raise
        raise converted from None


class LocalModel:
    """One model folder, loaded in this process (see :func:`load`)."""

    def __init__(self, service: Any, model_id: str) -> None:
        self._service = service
        self.id = model_id

    @property
    def info(self) -> dict[str, Any]:
        """The model's entry in ``GET /api/models`` (architecture, layers, heads, kinds, card...)."""
        served = self._service.get(self.id)
        info: dict[str, Any] = json.loads(served.info(self._service.device).model_dump_json())
        return info

    @property
    def device(self) -> str:
        return str(self._service.device)

    def translate(self, text: str, **options: Any) -> Result:
        """``POST /api/translate`` for ``text``: ``options`` are the body's fields (``beam_size``
        (5; 1 is greedy), ``max_length``, ``prefix``, ``disable_heads``, ``explain``,
        ``return_beam``, ``alternatives``, ``attention``, ``precision``...), same defaults."""
        sent = requests.body("translate", self.id, options, text=text)
        (answer,) = self._translate(requests.validate("translate", sent))
        return Result(answer, sent, self._stored)

    def translate_batch(self, texts: Sequence[str], **options: Any) -> list[Result]:
        """``POST /api/translate/batch``: one result per text, decoded together."""
        sent = requests.body("batch", self.id, options, texts=requests.texts_list(texts))
        answers = self._translate(requests.validate("batch", sent))
        shared = {k: v for k, v in sent.items() if k != "texts"}
        return [Result(a, {**shared, "text": t}, self._stored) for a, t in zip(answers, texts, strict=True)]

    def align(self, text: str, target: str, **options: Any) -> Result:
        """``POST /api/align``: the model teacher-forced on ``target`` as the translation."""
        from attnscope.engine.answers import answer_json
        from attnscope.engine.request import ServiceRequest

        sent = requests.body("align", self.id, options, text=text, target=target)
        request = ServiceRequest.of(requests.validate("align", sent))
        answer = _run(self._service.align(request))
        return Result(json.loads(answer_json(answer)), sent, self._stored)

    def explain(self, text: str, methods: Sequence[str] = ("norm", "rollout", "alti", "value_zeroing"),
                target: str | None = None, **options: Any) -> Result:  # fmt: skip
        """The translation (or, with ``target``, the alignment) with ``explain=methods``: read
        them with ``result.explanation(method, kind)``."""
        options = {**options, "explain": list(methods)}
        return self.translate(text, **options) if target is None else self.align(text, target, **options)

    def attribute(self, text: str, target: str | None = None, **options: Any) -> AttributionResult:
        """``POST /api/attribution``: input × gradient and integrated gradients of each target
        token (``steps``, ``beam_size``, ``contrast={"position", "token"}``)."""
        fields: dict[str, Any] = {"text": text} if target is None else {"text": text, "target": target}
        sent = requests.body("attribution", self.id, options, **fields)
        body = requests.validate("attribution", sent)
        from attnscope.engine.attribution_answer import attribution_answer

        answer = _run(attribution_answer(self._service, body))
        return AttributionResult(json.loads(answer.model_dump_json()), sent)

    def analyze(self, sentences: Sequence[str] | Path, references: Sequence[str] | Path | None = None,
                alignments: Sequence[str] | Path | None = None, *, rows: bool = True) -> HeadAnalysis:  # fmt: skip
        """``POST /api/analyze``: every head's statistics and role over ``sentences`` (a list, or
        a :class:`~pathlib.Path` to a file of one a line), greedy or teacher-forced on
        ``references``, with alignment F1 against ``alignments`` (Pharaoh lines): the numbers of
        ``attnscope analyze`` on the same lines. At most 256 sentences (the command takes more)."""
        from attnscope.engine.corpus_analysis import analyze_answer

        fields = analyze_fields(sentences, references, alignments)
        sent = requests.body("analyze", self.id, {"rows": rows}, **fields)
        return HeadAnalysis(_run(analyze_answer(self._service, requests.validate("analyze", sent))), sent)

    def _stored(self, attention_id: str, kind: str, layers: int, precision: int) -> Any:
        """``[layers, heads, query, key]`` of an on-demand answer, from the service's attention
        store, rounded as ``GET /api/attention/...`` rounds it (its 404 when evicted)."""
        from attnscope.engine.answers import matrix
        from attnscope.engine.attention_store import NotStored

        try:
            return matrix(self._service.attention_store.get(attention_id).attention[kind], precision)
        except NotStored as err:
            raise ModelNotFound(str(err), {"detail": str(err)}) from None

    def _translate(self, body: Any) -> list[dict[str, Any]]:
        from attnscope.engine.answers import answer_json
        from attnscope.engine.request import ServiceRequest

        answers = _run(self._service.translate(ServiceRequest.of(body)))
        return [json.loads(answer_json(a)) for a in answers]

    def close(self) -> None:
        """Stop the service's worker threads (the model is freed with this object)."""
        self._service.stop()

    def __repr__(self) -> str:
        return f"<LocalModel {self.id} on {self.device}>"


def load(name_or_folder: str | Path, *, device: str | None = None, models_dir: str | Path | None = None,
         **settings: Any) -> LocalModel | LocalVisionModel:  # fmt: skip
    """A model in this process: a model folder (``config.json``, weights, tokenizer), or the id
    of one in ``models_dir`` (default: the shipped models, or ``ATTNSCOPE_MODELS_DIR``); a
    vision model's folder (``vision.json``) gives a :class:`~attnscope.api.vision.LocalVisionModel`.
    ``device``: ``cpu``, ``cuda``, ``cuda:1`` (default as the server's: CUDA when available);
    ``settings``: any other server setting by its field name (``max_tokens=400``,
    ``quantize="int8"``...), which sets the same limits as on a server. An unknown id raises
    :class:`~attnscope.api.errors.ModelNotFound` listing the ids there are."""
    from attnscope.config import Settings
    from attnscope.repository import discover, is_model_folder
    from attnscope.vision.folders import discover as discover_vision

    _check_settings(settings, Settings.model_fields)
    overrides: dict[str, Any] = {"device": device} if device is not None else {}
    given = Path(name_or_folder).expanduser()
    llm = _llm_folder(given, models_dir)
    if llm is not None:  # a decoder-only model (docs/llm.md)
        return load_llm(llm, Settings(models_dir=llm.parent, **overrides, **settings))
    vision = _vision_folder(given, models_dir)
    if vision is not None:  # a vision model (docs/vision.md)
        return LocalVisionModel(vision, Settings(models_dir=vision.parent, **overrides, **settings))
    if is_model_folder(given):
        folder = given
    elif given.exists() or len(given.parts) > 1:
        detail = (f"{given} is not a model folder (it needs config.json, model.safetensors and a tokenizer)"
                  if given.exists() else f"{given}: no such model folder")  # fmt: skip
        raise ModelNotFound(detail, {"detail": detail, "available": []})
    else:
        root = Path(models_dir) if models_dir is not None else Settings().models_dir
        folder = root / str(name_or_folder)
        if not is_model_folder(folder):
            names = [p.name for p in discover(root)] + [p.name for p in discover_vision(root)]
            there = (f"available: {', '.join(names)}" if names else
                     f"{root} holds no model folders" if root.is_dir() else f"{root} does not exist")  # fmt: skip
            detail = f"unknown model {str(name_or_folder)!r}; {there}"
            raise ModelNotFound(detail, {"detail": detail, "available": names})
    service = _service_for(folder, Settings(models_dir=folder.parent, **overrides, **settings))
    return LocalModel(service, folder.name)


def _check_settings(settings: dict[str, Any], fields: Any) -> None:
    """TypeError naming each keyword that is no server setting (``Settings`` ignores unknown
    names, which would let ``devcie="cuda"`` pass unnoticed), with the likeliest one meant."""
    import difflib

    unknown = [name for name in settings if name not in fields]
    if unknown:
        named = [f"{name!r}" + "".join(f" (did you mean {m!r}?)" for m in difflib.get_close_matches(name, fields, 1))
                 for name in unknown]  # fmt: skip
        raise TypeError(f"load() got an unknown keyword {', '.join(named)}: the keywords past device and "
                        "models_dir are server settings (docs/api.md, Settings)")  # fmt: skip


def _llm_folder(given: Path, models_dir: str | Path | None) -> Path | None:
    """``given`` (a folder, or an id in ``models_dir``) when it is a decoder-only model folder."""
    from attnscope.config import Settings
    from attnscope.llm.folder import is_llm_folder

    if is_llm_folder(given):
        return given
    if given.exists() or len(given.parts) > 1:
        return None
    folder = (Path(models_dir) if models_dir is not None else Settings().models_dir) / str(given)
    return folder if is_llm_folder(folder) else None


def _vision_folder(given: Path, models_dir: str | Path | None) -> Path | None:
    """``given`` (a folder, or an id in ``models_dir``) when it is a vision model folder."""
    from attnscope.config import Settings
    from attnscope.vision.folders import is_vision_folder

    if is_vision_folder(given):
        return given
    if given.exists() or len(given.parts) > 1:
        return None
    folder = (Path(models_dir) if models_dir is not None else Settings().models_dir) / str(given)
    return folder if is_vision_folder(folder) else None


def _service_for(folder: Path, settings: Any) -> Any:
    """A service (the server's ``ModelService``) serving the one model in ``folder``: loaded
    here, at once, so a broken folder raises its own error rather than being listed unavailable."""
    from attnscope.engine.registry import ServedModel
    from attnscope.engine.service import ModelService
    from attnscope.repository import load_model_folder

    service = ModelService(settings)
    loaded = load_model_folder(folder, device=service.device, quantize=settings.quantize)
    served = ServedModel.of(loaded, settings.max_tokens)
    service.registry.serve_loaded(served, folder)
    return service


# -- decoder-only models (docs/llm.md): the same calls, answered as /api/translate answers an LLM --


class LocalLLM(LocalModel):
    """One decoder-only model folder loaded in this process (see :func:`load_llm`)."""

    def __init__(self, service: Any, llm: Any, model_id: str) -> None:
        super().__init__(service, model_id)
        self._llm = llm

    @property
    def info(self) -> dict[str, Any]:
        """The model's entry in ``GET /api/models`` (architecture ``decoder_only``)."""
        from attnscope.serving.llm_common import model_infos

        (info,), _ = model_infos(self._llm, self.device)
        described: dict[str, Any] = json.loads(info.model_dump_json())
        return described

    def align(self, text: str, target: str, **options: Any) -> Result:
        """``POST /api/align``: the model teacher-forced on ``target`` (then its stop token)."""
        from attnscope.engine.answers import answer_json
        from attnscope.serving import llm_common

        sent = requests.body("align", self.id, options, text=text, target=target)
        answer = _run(llm_common.align(self._service, self._llm, requests.validate("align", sent)))
        return Result(json.loads(answer_json(answer)), sent)

    def attribute(self, text: str, target: str | None = None, **options: Any) -> AttributionResult:
        """``POST /api/attribution`` for a decoder-only model: attributed to the source tokens of
        its prompt (``steps``, ``beam_size``, ``contrast={"position", "token"}``: the foil text,
        one token of the model's tokenizer or several, scored as a whole continuation)."""
        from attnscope.serving import llm_common

        fields: dict[str, Any] = {"text": text} if target is None else {"text": text, "target": target}
        sent = requests.body("attribution", self.id, options, **fields)
        answer = _run(llm_common.attribution(self._service, self._llm, requests.validate("attribution", sent)))
        return AttributionResult(json.loads(answer.model_dump_json()), sent)

    def analyze(self, sentences: Sequence[str] | Path, references: Sequence[str] | Path | None = None,
                alignments: Sequence[str] | Path | None = None, *, rows: bool = True) -> HeadAnalysis:  # fmt: skip
        """Not for decoder-only models yet: :class:`~attnscope.api.errors.InvalidRequest`."""
        raise unprocessable([entry(("body", "model"), "head analysis is not available for decoder-only models yet "
                                   "(docs/llm.md)", "value_error")])  # fmt: skip

    def _translate(self, body: Any) -> list[dict[str, Any]]:
        from attnscope.engine.answers import answer_json
        from attnscope.serving import llm_common

        answers = _run(llm_common.translate(self._service, self._llm, body))
        return [json.loads(answer_json(a)) for a in answers]

    def __repr__(self) -> str:
        return f"<LocalLLM {self.id} on {self.device}>"


def load_llm(folder: Path, settings: Any) -> LocalLLM:
    """The decoder-only model in ``folder``, loaded at once (a broken folder raises its own
    error), beside an engine service that lends it decode slots and the attention store."""
    from attnscope.engine.service import ModelService
    from attnscope.llm.folder import load_llm_folder
    from attnscope.llm.translator import LLMTranslator
    from attnscope.serving.llm import make_service

    service = ModelService(settings)
    llm = make_service(settings)
    llm.models[folder.name] = LLMTranslator(load_llm_folder(folder, llm.device))
    return LocalLLM(service, llm, folder.name)
