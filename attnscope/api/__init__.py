"""The Python API: :func:`load` a model in this process, or :class:`Client` for a server's;
both return :class:`Result` objects (docs/python.md)."""

from __future__ import annotations

from attnscope.api.analysis import HeadAnalysis
from attnscope.api.client import Client, RemoteModel
from attnscope.api.errors import (
    APIError,
    DeadlineExceeded,
    InvalidRequest,
    ModelNotFound,
    ServerBusy,
)
from attnscope.api.local import LocalModel, load
from attnscope.api.results import AttributionResult, Result
from attnscope.api.vision import CaptionResult, GlimpseResult, LocalVisionModel, RemoteVisionModel

__all__ = [
    "APIError", "AttributionResult", "CaptionResult", "Client", "DeadlineExceeded", "GlimpseResult",
    "HeadAnalysis", "InvalidRequest", "LocalModel", "LocalVisionModel", "ModelNotFound", "RemoteModel",
    "RemoteVisionModel", "Result", "ServerBusy", "load",
]  # fmt: skip
