"""``attnscope.Client``: the same models, methods and results over a server's REST API.

``attnscope.Client("http://gpu-box:8000").load("en-de-transformer")`` answers like
``attnscope.load("en-de-transformer")``: the same method names and options, the same
:class:`~attnscope.api.results.Result` (built from the JSON the server sent), the same
exceptions with the server's ``detail`` as message. Standard library only (``urllib``).

A 503 (queue full, models loading) is retried after the server's ``Retry-After`` (at most
``max_wait_s`` per wait), ``retries`` times, then raised as
:class:`~attnscope.api.errors.ServerBusy`."""

from __future__ import annotations

import gzip
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnscope.api import requests
from attnscope.api.analysis import HeadAnalysis, analyze_fields
from attnscope.api.errors import APIError, for_status
from attnscope.api.results import AttributionResult, Result
from attnscope.api.vision import RemoteVisionModel

__all__ = ["Client", "RemoteModel"]


class Client:
    """A server's API at ``url`` (``http://host:port``); ``timeout_s`` bounds each HTTP call."""

    def __init__(self, url: str, *, timeout_s: float = 120.0, retries: int = 3, max_wait_s: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Client needs the server's URL with its scheme, such as http://{url}; got {url!r}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_wait_s = max_wait_s

    def load(self, model: str) -> RemoteModel | RemoteVisionModel:
        """The server's model ``model`` (checked: :class:`ModelNotFound` lists the ids there); a
        vision model comes back as a :class:`~attnscope.api.vision.RemoteVisionModel`."""
        infos = {m["id"]: m for m in self.models()}
        if model in infos:
            return RemoteModel(self, model, infos[model])
        vision = {m["id"]: m for m in self.vision_models()}
        if model in vision:
            return RemoteVisionModel(self, model, vision[model])
        from attnscope.api.errors import ModelNotFound

        names = [*infos, *vision]
        detail = f"unknown model {model!r}; available: {', '.join(names) or 'none are loaded'}"
        raise ModelNotFound(detail, {"detail": detail, "available": names})

    def models(self) -> list[dict[str, Any]]:
        """``GET /api/models``'s ``models``."""
        listed: list[dict[str, Any]] = self.call("GET", "/api/models")["models"]
        return listed

    def vision_models(self) -> list[dict[str, Any]]:
        """``GET /api/vision/models``'s ``models``."""
        listed: list[dict[str, Any]] = self.call("GET", "/api/vision/models")["models"]
        return listed

    def health(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.call("GET", "/api/health")
        return answer

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One API call: its JSON answer; an error status raised as the API's exception, 503
        retried as the class says."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "Accept-Encoding": "gzip"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return _json(response.read(), response.headers.get("Content-Encoding"))
            except urllib.error.HTTPError as err:
                wait = _retry_after(err.headers.get("Retry-After"))
                error = _error(err, wait)
                if err.code != 503 or attempt == self.retries:
                    raise error from None
                time.sleep(min(wait, self.max_wait_s))
            except (urllib.error.URLError, TimeoutError) as err:  # no answer at all (HTTPError is caught above)
                raise _unreachable(self.url + path, err, self.timeout_s) from None
        raise AssertionError("unreachable")

    def __repr__(self) -> str:
        return f"<Client {self.url}>"


class RemoteModel:
    """A model on a server: the methods of :class:`~attnscope.api.local.LocalModel`."""

    def __init__(self, client: Client, model_id: str, info: dict[str, Any]) -> None:
        self._client = client
        self.id = model_id
        self.info = info

    @property
    def device(self) -> str:
        return str(self.info.get("device", "?"))

    def translate(self, text: str, **options: Any) -> Result:
        sent = requests.body("translate", self.id, options, text=text)
        return Result(self._post("translate", sent), sent, self._fetch)

    def translate_batch(self, texts: Sequence[str], **options: Any) -> list[Result]:
        sent = requests.body("batch", self.id, options, texts=requests.texts_list(texts))
        shared = {k: v for k, v in sent.items() if k != "texts"}
        return [Result(a, {**shared, "text": t}, self._fetch) for a, t in zip(self._post("batch", sent), texts, strict=True)]

    def align(self, text: str, target: str, **options: Any) -> Result:
        sent = requests.body("align", self.id, options, text=text, target=target)
        return Result(self._post("align", sent), sent, self._fetch)

    def explain(self, text: str, methods: Sequence[str] = ("norm", "rollout", "alti", "value_zeroing"),
                target: str | None = None, **options: Any) -> Result:  # fmt: skip
        options = {**options, "explain": list(methods)}
        return self.translate(text, **options) if target is None else self.align(text, target, **options)

    def attribute(self, text: str, target: str | None = None, **options: Any) -> AttributionResult:
        fields: dict[str, Any] = {"text": text} if target is None else {"text": text, "target": target}
        sent = requests.body("attribution", self.id, options, **fields)
        return AttributionResult(self._post("attribution", sent), sent)

    def analyze(self, sentences: Sequence[str] | Path, references: Sequence[str] | Path | None = None,
                alignments: Sequence[str] | Path | None = None, *, rows: bool = True) -> HeadAnalysis:  # fmt: skip
        """``POST /api/analyze``: see :meth:`attnscope.api.local.LocalModel.analyze` (files are
        read here and sent as lists)."""
        sent = requests.body("analyze", self.id, {"rows": rows}, **analyze_fields(sentences, references, alignments))
        return HeadAnalysis(self._post("analyze", sent), sent)

    def _fetch(self, attention_id: str, kind: str, layers: int, precision: int) -> Any:
        """``[layers, heads, query, key]`` of an on-demand answer: ``GET /api/attention/{id}/{kind}/{layer}``
        for each layer (the numbers an inline answer gives at ``precision``)."""
        import numpy as np

        base = f"/api/attention/{urllib.parse.quote(attention_id)}/{urllib.parse.quote(kind)}"
        return np.stack([np.asarray(self._client.call("GET", f"{base}/{layer}?precision={precision}"))
                         for layer in range(layers)])  # fmt: skip

    def _post(self, route: requests.Route, body: dict[str, Any]) -> Any:
        return self._client.call("POST", requests.PATHS[route], body)

    def __repr__(self) -> str:
        return f"<RemoteModel {self.id} at {self._client.url}>"


def _json(raw: bytes, encoding: str | None) -> Any:
    return json.loads(gzip.decompress(raw) if encoding == "gzip" else raw)


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 1.0
    except ValueError:
        return 1.0


def _error(err: urllib.error.HTTPError, retry_after_s: float) -> APIError:
    try:
        body = _json(err.read(), err.headers.get("Content-Encoding"))
    except ValueError:
        body = {"detail": f"HTTP {err.code} {err.reason}"}
    if not isinstance(body, dict):
        body = {"detail": str(body)}
    return for_status(err.code, body, retry_after_s)


def _unreachable(url: str, err: OSError, timeout_s: float) -> OSError:
    """A call that got no HTTP answer, as one line: TimeoutError past ``timeout_s``, else
    ConnectionError with the socket's reason (a server not started, a wrong host or port)."""
    reason = getattr(err, "reason", err)
    if isinstance(reason, TimeoutError):
        return TimeoutError(f"{url}: no answer within {timeout_s:g} s (Client(url, timeout_s=...) waits longer)")
    return ConnectionError(f"cannot reach {url} ({reason}): is the server running (attnscope serve)?")
