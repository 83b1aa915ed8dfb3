"""The exceptions of the Python API: one class per REST error status, raised with the REST
answer's ``detail`` as their message, by the in-process model and by the client alike.

So ``except attnscope.InvalidRequest`` catches a bad option whether the model runs in this process
or on a server, and ``str(err)`` is the 422's ``detail`` word for word."""

from __future__ import annotations

from typing import Any

__all__ = ["APIError", "DeadlineExceeded", "InvalidRequest", "ModelNotFound", "ServerBusy", "from_engine"]


class APIError(Exception):
    """Any error the API answers: ``status`` is the HTTP status the server gives it, ``detail``
    its message, ``body`` the whole JSON answer (``{"detail": ...}`` plus what the status adds)."""

    status: int = 500

    def __init__(self, detail: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.body = body if body is not None else {"detail": detail}


class InvalidRequest(APIError, ValueError):
    """422: an invalid option or text, or a request over a cost limit; ``errors`` names each field
    as the REST answer does (``field``, ``loc``, ``msg``, ``type``)."""

    status = 422

    @property
    def errors(self) -> list[dict[str, Any]]:
        return list(self.body.get("errors", []))


class ModelNotFound(APIError, LookupError):
    """404: no such model; ``available`` lists the ids that exist."""

    status = 404

    @property
    def available(self) -> list[str]:
        return list(self.body.get("available", []))


class ServerBusy(APIError, RuntimeError):
    """503: the queue is full, the models are loading or the server is stopping (after the
    client's retries); ``retry_after_s`` is the server's advice."""

    status = 503

    def __init__(self, detail: str, body: dict[str, Any] | None = None, retry_after_s: float = 1.0) -> None:
        super().__init__(detail, body)
        self.retry_after_s = retry_after_s


class DeadlineExceeded(APIError, TimeoutError):
    """504: the request ran past the server's deadline (``ATTNSCOPE_REQUEST_TIMEOUT_S``)."""

    status = 504


_BY_STATUS: dict[int, type[APIError]] = {
    422: InvalidRequest, 404: ModelNotFound, 503: ServerBusy, 504: DeadlineExceeded
}  # fmt: skip


def for_status(status: int, body: dict[str, Any], retry_after_s: float = 1.0) -> APIError:
    """The exception of an error answer (``status``, its JSON ``body``)."""
    detail = str(body.get("detail", f"HTTP {status}"))
    kind = _BY_STATUS.get(status, APIError)
    if kind is ServerBusy:
        return ServerBusy(detail, body, retry_after_s)
    err = kind(detail, body)
    if kind is APIError:
        err.status = status
    return err


def entry(loc: tuple[str | int, ...], msg: str, kind: str) -> dict[str, Any]:
    """One item of a 422's ``errors``, as the server writes it."""
    from attnscope.engine.errors import field_name

    return {"field": field_name(loc), "loc": list(loc), "msg": msg, "type": kind}


def unprocessable(entries: list[dict[str, Any]]) -> InvalidRequest:
    """The 422 of these ``errors`` entries: its ``detail`` joins them as the server does."""
    detail = "; ".join(f"{e['field']}: {e['msg']}" for e in entries) or "invalid request"
    return InvalidRequest(detail, {"detail": detail, "errors": entries})


def from_engine(err: BaseException) -> BaseException:
    """The API exception of an error the service raised (the same status and message the
    server's handlers give it); any other error is returned unchanged."""
    from attnscope.engine import errors as engine

    if isinstance(err, engine.InvalidInput):
        return unprocessable([entry(err.loc, err.message, err.kind)])
    if isinstance(err, engine.UnknownModel):
        return ModelNotFound(str(err), {"detail": str(err), "available": err.available})
    if isinstance(err, engine.Unavailable):
        return ServerBusy(str(err), None, err.retry_after_s)
    if isinstance(err, engine.DeadlineExceeded):
        return DeadlineExceeded(str(err))
    return err
