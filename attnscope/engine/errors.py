"""The engine's domain errors: what a caller of the engine (the web layer, the Python API, a
script) catches. Each says what went wrong in words a user can act on; none knows about HTTP
(``attnscope.serving.errors`` maps them to status codes, ``Retry-After`` included)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Loc = tuple[str | int, ...]


class EngineError(Exception):
    """The base of every error the engine raises on purpose (never a bug)."""


class UnknownModel(EngineError, LookupError):
    """No such model is served; ``unavailable`` is the folder's load failure, if it has one."""

    def __init__(self, model_id: str, available: Sequence[str], unavailable: Any = None) -> None:
        self.model_id = model_id
        self.available = list(available)
        names = ", ".join(self.available) or "none are loaded"
        if unavailable is not None:
            super().__init__(f"model {model_id!r} is unavailable ({unavailable.reason}); available: {names}")
        else:
            super().__init__(f"unknown model {model_id!r}; available: {names}")


class InvalidInput(EngineError, ValueError):
    """A request that passed the schema but breaks a configured limit; ``loc`` as pydantic's."""

    def __init__(self, loc: Loc, message: str, kind: str = "value_error") -> None:
        self.loc = loc
        self.message = message
        self.kind = kind
        super().__init__(f"{field_name(loc)}: {message}")


class Unavailable(EngineError, RuntimeError):
    """The engine cannot take the request now (models still loading, queue full, shutting
    down); ``retry_after_s`` says when to ask again (HTTP: 503 with ``Retry-After``)."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class DeadlineExceeded(EngineError, TimeoutError):
    """The request ran past its deadline (queueing and decoding); HTTP: 504."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        super().__init__(
            f"the request ran past its {timeout_s:g} s deadline (ATTNSCOPE_REQUEST_TIMEOUT_S) and was "
            "stopped; ask for fewer beams, a shorter max_length or fewer texts"
        )


class ClientGone(EngineError):
    """The caller gave up (an HTTP client disconnected) before its answer was ready."""


def field_name(loc: Sequence[Any]) -> str:
    """``("body", "texts", 2)`` -> ``texts[2]``; the bare body is ``body``."""
    parts = list(loc[1:] if len(loc) > 1 and loc[0] in ("body", "query", "path") else loc)
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"
