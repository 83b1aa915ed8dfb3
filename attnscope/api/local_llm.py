"""``attnscope.load()`` of a decoder-only model folder (docs/llm.md): the same
:class:`~attnscope.api.local.LocalModel` calls, answered as ``POST /api/translate`` answers a
decoder-only model (:mod:`attnscope.serving.llm_common`), in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnscope.api import requests
from attnscope.api.errors import entry, unprocessable
from attnscope.api.local import LocalModel, _run
from attnscope.api.results import AttributionResult, Result


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
        """Not for decoder-only models yet: :class:`~attnscope.api.errors.InvalidRequest`."""
        raise unprocessable([entry(("body", "model"), "attribution is not available for decoder-only models yet "
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
