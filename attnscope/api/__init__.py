"""The Python API: :func:`load` a model in this process, or :class:`Client` for a server's;
both return :class:`Result` objects (docs/python.md)."""

from __future__ import annotations

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

__all__ = [
    "APIError", "AttributionResult", "Client", "DeadlineExceeded", "InvalidRequest", "LocalModel",
    "ModelNotFound", "RemoteModel", "Result", "ServerBusy", "load",
]  # fmt: skip
