"""Issue 45.6's Ray Serve defects, on the code paths themselves (no Ray started; the real
cluster's checks are in test_ray_serve.py): one ``X-Request-ID`` per answer, a request whose
replica died is a 503 with ``Retry-After`` rather than a plain 500, and ``--port`` against a
Serve already running on the cluster is either honoured or refused, never logged and ignored."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from attnscope.config import Settings
from attnscope.serving import ray_serve
from attnscope.serving.ray_serve_http import OneRequestId, ReplicaGone, proxy_middlewares


def test_a_replica_leaves_the_request_id_to_the_proxy(tmp_path: Path) -> None:
    """The proxy puts its id in the request and on the answer: the replica's app logs that id
    and adds no second header (every answer had two)."""
    replica = ray_serve.Replica({"models_dir": str(tmp_path)})
    with TestClient(replica.__serve_build_asgi_app__(), base_url="http://localhost") as client:
        r = client.get("/api/health", headers={"x-request-id": "from-the-proxy"})
    assert r.status_code == 200
    assert r.headers.get_list("x-request-id") == []
    assert r.headers["x-content-type-options"] == "nosniff"  # the app's other headers stay


async def _never_answers(scope: Any, receive: Any, send: Any) -> None:
    """Serve's proxy when the replica died mid-request: it returns without any answer."""
    scope["headers"] = [*scope["headers"], (b"x-request-id", b"serve-id")]  # its RequestIdMiddleware


async def _raises(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("ActorDiedError")


@pytest.mark.parametrize("proxy", [_never_answers, _raises])
def test_a_request_whose_replica_died_is_a_503_with_retry_after(proxy: Any) -> None:
    client = TestClient(ReplicaGone(proxy), raise_server_exceptions=False)  # no lifespan: only the request
    r = client.post("/api/translate", json={"model": "m", "text": "a dog"})
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
    assert "retry" in r.json()["detail"]
    expected = ["serve-id"] if proxy is _never_answers else []
    assert r.headers.get_list("x-request-id") == expected


def test_the_apps_own_answers_pass_the_proxy_layers_unchanged() -> None:
    async def failing(request: Any) -> JSONResponse:
        return JSONResponse({"detail": "ours"}, status_code=500, headers={"x-request-id": "app"})

    app = ReplicaGone(OneRequestId(Starlette(routes=[Route("/x", failing)])))
    with TestClient(app) as client:
        r = client.get("/x")
    assert r.status_code == 500 and r.json() == {"detail": "ours"}
    assert r.headers.get_list("x-request-id") == []
    assert [m.cls for m in proxy_middlewares()] == [ReplicaGone]


class _Serve:
    """ray.serve as ``_start_serve`` sees it: a Serve on ``port`` (None: none) running ``apps``."""

    def __init__(self, port: int | None, apps: list[str]) -> None:
        self.calls: list[Any] = []
        client = None if port is None else types.SimpleNamespace(http_config=types.SimpleNamespace(port=port))
        self.context = types.SimpleNamespace(_get_global_client=lambda **_: client)
        self.apps = apps

    def status(self) -> Any:
        return types.SimpleNamespace(applications={a: None for a in self.apps})

    def start(self, http_options: dict[str, Any]) -> None:
        self.calls.append(("start", http_options["port"]))

    def shutdown(self) -> None:
        self.calls.append("shutdown")


@pytest.mark.parametrize(
    ("running", "apps", "calls", "said"),
    [
        (None, [], [("start", 8123)], "started Serve on port 8123"),
        (8123, ["other"], [], "joined the Serve running on port 8123"),
        (8000, [], ["shutdown", ("start", 8123)], "started Serve on port 8123"),
    ],
)
def test_serve_starts_on_the_port_asked_for_or_joins_it(
    running: int | None, apps: list[str], calls: list[Any], said: str
) -> None:
    serve = _Serve(running, apps)
    assert ray_serve._start_serve(serve, Settings(port=8123)) == said  # type: ignore[arg-type]
    assert serve.calls == calls


def test_another_port_while_other_apps_run_is_refused_naming_the_port() -> None:
    """Issue 45.6: ``--port Q`` logged Q while Serve kept the old port."""
    serve = _Serve(8000, [ray_serve.APP_NAME, "shop"])
    with pytest.raises(ValueError, match=r"listens on port 8000 for shop; .* use --port 8000"):
        ray_serve._start_serve(serve, Settings(port=8123))  # type: ignore[arg-type]
    assert serve.calls == []
