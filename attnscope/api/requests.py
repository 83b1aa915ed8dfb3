"""Keyword options -> the JSON body of a REST request, and its validation by the REST schemas.

Both doors build the body here, so they name the options alike (the REST field names:
``beam_size``, ``prefix``, ``disable_heads``, ``explain`` ...) and accept the same Python
values: tuples for lists, numpy numbers for numbers, ``(kind, layer, head)`` for a head. The
in-process model validates the body with the route's own pydantic schema (so an invalid option
is the REST 422, word for word); the client sends it and the server validates it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from attnscope.api.errors import entry, unprocessable

Route = Literal["translate", "batch", "align", "attribution", "analyze"]

PATHS: dict[Route, str] = {
    "translate": "/api/translate",
    "batch": "/api/translate/batch",
    "align": "/api/align",
    "attribution": "/api/attribution",
    "analyze": "/api/analyze",
}


def body(route: Route, model: str, options: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The JSON body of ``route`` for ``model``: ``fields`` (text, texts, target) and the
    caller's ``options``, converted to plain JSON values (a head given as a ``(kind, layer,
    head)`` tuple becomes ``{"kind", "layer", "head"}``). Options left out take the REST
    defaults on either side."""
    taken = sorted(set(options) & {"model", "text", "texts", "target", "sentences"})
    if taken:
        raise TypeError(f"{taken[0]!r} is an argument of the method (or of load), not an option")
    values = {"model": model, **fields, **options}
    heads = values.get("disable_heads")
    if isinstance(heads, Sequence) and not isinstance(heads, str):
        values["disable_heads"] = [_head(h) for h in heads]
    if isinstance(values.get("alignment"), tuple):
        values["alignment"] = _head(values["alignment"])
    plain: dict[str, Any] = json.loads(json.dumps(values, default=_plain))
    return plain


def texts_list(texts: Sequence[str]) -> list[str]:
    """``translate_batch``'s texts as a list; TypeError for one ``str``, which would otherwise
    be split into its characters (each a sentence to translate)."""
    if isinstance(texts, str):
        raise TypeError("texts: give a list of sentences, not one str (translate() takes one)")
    return list(texts)


def validate(route: Route, values: dict[str, Any]) -> Any:
    """The route's request schema validated from ``values`` (a JSON body), as FastAPI does it;
    :class:`~attnscope.api.errors.InvalidRequest` with the REST 422's message otherwise."""
    from pydantic import ValidationError

    schema = _schema(route)
    try:
        return schema.model_validate(values)
    except ValidationError as err:
        entries = [entry(("body", *e["loc"]), str(e["msg"]), str(e["type"])) for e in err.errors()]
        raise unprocessable(entries) from None


def _schema(route: Route) -> Any:
    if route == "attribution":
        from attnscope.engine.attribution_answer import AttributionRequest

        return AttributionRequest
    if route == "analyze":
        from attnscope.engine.corpus_analysis import AnalyzeRequest

        return AnalyzeRequest
    from attnscope.engine import schemas

    return {"translate": schemas.TranslateRequest, "batch": schemas.BatchTranslateRequest, "align": schemas.AlignRequest}[route]


def _head(head: Any) -> Any:
    if isinstance(head, tuple | list) and len(head) == 3:
        kind, layer, number = head
        return {"kind": kind, "layer": layer, "head": number}
    return head


def _plain(value: Any) -> Any:
    """numpy numbers and arrays, torch tensors and sets as JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")
