"""The handlers that turn every failure (the engine's errors, ``attnscope.engine.errors``, included)
into a JSON answer.

Bodies always have a readable ``detail`` string: 422 adds ``errors`` (one entry per invalid
field), 404 for a model adds ``available``; anything unexpected is a logged 500, never a trace."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnscope.engine.errors import (
    ClientGone,
    DeadlineExceeded,
    InvalidInput,
    Unavailable,
    UnknownModel,
    field_name,
)

logger = logging.getLogger(__name__)

_UNPARSEABLE_BODY = "There was an error parsing the body"

# Each engine error's HTTP status (attnscope.engine.errors): the handlers below and the stream's
# error events (attnscope.serving.stream) both read it
STATUS: dict[type[Exception], int] = {
    InvalidInput: 422, UnknownModel: 404, Unavailable: 503, DeadlineExceeded: 504, ClientGone: 499,
}


def status_of(exc: BaseException) -> int:
    """The HTTP status of ``exc``: its engine error's, else 500."""
    return next((code for kind, code in STATUS.items() if isinstance(exc, kind)), 500)


def retry_after(seconds: int) -> dict[str, str]:
    """The ``Retry-After`` header (written here only): an :class:`Unavailable`'s
    ``retry_after_s``, or the middleware's when shutdown stops a request."""
    return {"Retry-After": str(seconds)}


def _entry(loc: Sequence[Any], msg: str, kind: str) -> dict[str, Any]:
    return {"field": field_name(loc), "loc": list(loc), "msg": msg, "type": kind}


def _validation_entry(err: dict[str, Any]) -> dict[str, Any]:
    loc, msg, kind = tuple(err.get("loc", ())), str(err.get("msg", "invalid")), str(err.get("type", ""))
    if kind == "json_invalid":  # FastAPI puts the character position into loc
        reason = (err.get("ctx") or {}).get("error", "")
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        return {"field": "body", "loc": ["body"], "msg": f"malformed JSON{where}: {reason}".rstrip(": "), "type": kind}
    if loc == ("body",) and kind in ("model_attributes_type", "dict_type", "model_type"):
        msg = "must be a JSON object, sent with Content-Type: application/json"
    return _entry(loc, msg, kind)


def _unprocessable(entries: list[dict[str, Any]]) -> JSONResponse:
    detail = "; ".join(f"{e['field']}: {e['msg']}" for e in entries) or "invalid request"
    return JSONResponse(status_code=422, content={"detail": detail, "errors": entries})


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return _unprocessable([_validation_entry(e) for e in exc.errors()])


async def _on_invalid_input(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InvalidInput)
    return _unprocessable([_entry(exc.loc, exc.message, exc.kind)])


async def _on_unknown_model(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, UnknownModel)
    return JSONResponse(status_code=status_of(exc), content={"detail": str(exc), "available": exc.available})


async def _on_unavailable(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Unavailable)
    return JSONResponse(status_code=status_of(exc), content={"detail": str(exc)}, headers=retry_after(exc.retry_after_s))


async def _on_deadline(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DeadlineExceeded)
    return JSONResponse(status_code=status_of(exc), content={"detail": str(exc)})


async def _on_client_gone(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=status_of(exc), content={"detail": "the client closed the request"})


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.detail == _UNPARSEABLE_BODY:
        # FastAPI's 400 for a body it cannot even decode: bytes that are not UTF-8, or JSON nested
        # deeper than the parser's recursion limit
        entry = {"field": "body", "loc": ["body"], "msg": f"malformed JSON: {_unparseable(exc.__cause__)}", "type": "json_invalid"}
        return _unprocessable([entry])
    return JSONResponse(
        status_code=exc.status_code, content={"detail": str(exc.detail)}, headers=getattr(exc, "headers", None)
    )


def _unparseable(cause: BaseException | None) -> str:
    if isinstance(cause, RecursionError):
        return "the body is nested too deeply (arrays and objects within each other); no request needs more than a few levels"
    if isinstance(cause, UnicodeDecodeError):
        return "the body is not valid UTF-8"
    return "the body cannot be read as JSON"


def _unexpected_detail(exc: BaseException) -> dict[str, str]:
    return {"detail": f"internal server error ({type(exc).__name__}); see the server log"}


def unexpected_start(scope: Any, exc: BaseException) -> dict[str, Any]:
    """Log an unexpected failure of the request of ``scope`` (with its traceback) and return the
    ASGI start of its JSON 500; :func:`unexpected_body` is the body."""
    logger.error("%s %s failed: %r", scope.get("method"), scope.get("path"), exc, exc_info=exc)
    length = str(len(unexpected_body(exc))).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", length)]
    return {"type": "http.response.start", "status": 500, "headers": headers}


def unexpected_body(exc: BaseException) -> bytes:
    return json.dumps(_unexpected_detail(exc)).encode()


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.error("%s %s failed: %r", request.method, request.url.path, exc, exc_info=exc)
    return JSONResponse(status_code=500, content=_unexpected_detail(exc))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(InvalidInput, _on_invalid_input)
    app.add_exception_handler(UnknownModel, _on_unknown_model)
    app.add_exception_handler(Unavailable, _on_unavailable)
    app.add_exception_handler(DeadlineExceeded, _on_deadline)
    app.add_exception_handler(ClientGone, _on_client_gone)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)
