"""``attnscope serve --ray [ADDRESS]``: the same FastAPI app (:func:`attnscope.serving.main.create_app`,
its lifespan, routes and middleware) as a Ray Serve deployment.

Each replica is one ingress deployment replica that builds the app once: its lifespan loads the
models once per replica, and the micro-batching scheduler lives inside it, so requests that Serve
routes to the same replica batch as they would in the plain server. Serve's HTTP proxy is the one
endpoint in front of every replica. Readiness maps onto Serve's health checks: a replica's
``check_health`` waits for its models on the first (start-up) check and fails once the app is
shutting down, so Serve routes traffic only to replicas whose models are loaded and
``/api/ready`` through the proxy answers ready only then. The proxy, not the replica, sets each
answer's ``X-Request-ID``, and a request whose replica dies is a 503 with ``Retry-After``
(:mod:`attnscope.serving.ray_serve_http`).

Ray is optional (``pip install 'attnscope[ray]'``) and imported only here, lazily. For a cluster
deployment without this command (KubeRay ``RayService``, ``serve run``), :func:`build` is the
application builder: ``import_path: attnscope.serving.ray_serve:build`` (docs/ray.md)."""

from __future__ import annotations

import asyncio
import difflib
import logging
import math
import os
import signal
import threading
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from attnscope.config import Settings
from attnscope.extras import join_ray, require
from attnscope.serving.ray_serve_http import PROXY_CALLBACK, OneRequestId

if TYPE_CHECKING:
    from fastapi import FastAPI

    from attnscope.engine.service import ModelService

logger = logging.getLogger(__name__)
APP_NAME = "attnscope"


def import_ray() -> tuple[ModuleType, ModuleType]:
    """``(ray, ray.serve)``, or :class:`~attnscope.extras.MissingExtra` naming the extra."""
    return require("ray", "ray", purpose="serve --ray"), require("ray.serve", "ray", purpose="serve --ray")


def replica_health(service: ModelService) -> None:
    """Serve's health check of one replica: raises unless its app can translate (the models are
    loaded and it is not shutting down), the same condition as its ``/api/ready``."""
    status = service.status
    if status != "ready":
        raise RuntimeError(f"attnscope replica is {status}")
    if not service.ids:  # a missing or empty models_dir: alive, but it can translate nothing
        raise RuntimeError(f"attnscope replica serves no model (models from {service.settings.models_dir})")


class Replica:
    """One replica: the whole app, built from ``settings`` when Serve starts the replica (never
    in the driver: the models load in the replica's process, once each)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        from attnscope.serving.main import create_app

        self._app: FastAPI = create_app(Settings(**settings))
        self._app.add_middleware(OneRequestId)  # outermost: the proxy adds the header itself

    def __serve_build_asgi_app__(self) -> FastAPI:
        return self._app  # Serve runs its lifespan (which starts loading the models) next

    async def check_health(self) -> None:
        """The first check runs before the replica gets traffic: it waits for the models; later
        checks answer at once (:func:`replica_health`)."""
        service: ModelService = self._app.state.service
        while service.status == "loading":
            await asyncio.sleep(0.1)
        replica_health(service)


def deployment_options(settings: Settings) -> dict[str, Any]:
    """``serve.deployment`` options from the settings: replicas (fixed, or autoscaled between
    ``ray_min_replicas`` and ``ray_max_replicas`` on ongoing requests per replica), each with
    ``ray_replica_cpus``/``ray_replica_gpus``, and room for the app's own queue (requests wait in
    the replica's scheduler, where they batch, not in Serve's)."""
    low, high = settings.ray_min_replicas, settings.ray_max_replicas
    if high < low:
        raise ValueError(f"ray_max_replicas ({high}) is below ray_min_replicas ({low})")
    options: dict[str, Any] = {
        "name": APP_NAME,
        "ray_actor_options": {"num_cpus": settings.ray_replica_cpus, "num_gpus": settings.ray_replica_gpus},
        "max_ongoing_requests": settings.max_queue + settings.inference_threads,
        "health_check_period_s": 5.0,
        "graceful_shutdown_timeout_s": settings.shutdown_timeout_s + 2.0,
    }
    if low == high:
        options["num_replicas"] = low
    else:
        options["autoscaling_config"] = {
            "min_replicas": low,
            "max_replicas": high,
            "target_ongoing_requests": settings.inference_threads,  # busy decode slots
        }
    return options


def application(settings: Settings) -> Any:
    """The Serve application (a bound deployment) serving ``settings``'s models."""
    _, serve = import_ray()
    ingress = serve.ingress()(Replica)
    return serve.deployment(**deployment_options(settings))(ingress).bind(settings.model_dump())


def build(args: dict[str, str]) -> Any:
    """Application builder for ``serve run`` / a RayService's ``import_path``: ``args`` are
    Settings fields (e.g. ``models_dir``, ``ray_max_replicas``) over the replicas' ``ATTNSCOPE_*``."""
    unknown = sorted(set(args) - set(Settings.model_fields))
    if unknown:  # a typo (ray_max_replica=4) would otherwise be ignored silently
        hints = [f"{name} (did you mean {', '.join(close)}?)" if (close := difflib.get_close_matches(name, Settings.model_fields, 2))
                 else name for name in unknown]  # fmt: skip
        raise ValueError(f"unknown attnscope builder argument(s): {'; '.join(hints)}")
    return application(Settings(**args))  # type: ignore[arg-type]


def run(address: str | None = None, **flags: Any) -> None:
    """Serve on Ray until SIGINT/SIGTERM: on the cluster at ``address`` (``auto``, ``ray://...``),
    or on a local Ray started here when None. Serve's HTTP proxy listens on the settings' host and
    port; on exit the application is deleted (and a local Ray shut down, leaving no process)."""
    settings = Settings(**flags)
    options = deployment_options(settings)  # a bad bound fails before Ray is even imported
    ray, serve = import_ray()
    local = not address
    if local:
        _check_local(settings)
        _proxy_callback()
    cpus = max(os.cpu_count() or 1, math.ceil(settings.ray_max_replicas * settings.ray_replica_cpus))
    join_ray(address, cpus=cpus, purpose="serve --ray")  # the local one: CPUs for the most replicas
    stop = _stop_on_signals()
    try:
        how = _start_serve(serve, settings)
        logger.info("deploying %s on Ray Serve (%s): %s", APP_NAME, how, options)
        serve.run(application(settings), name=APP_NAME, route_prefix="/")
        logger.info("attnscope on Ray Serve at http://%s:%d (replicas loaded)", settings.host, settings.port)
        stop.wait()
    finally:
        logger.info("shutting down the Ray Serve application")
        if local:
            serve.shutdown()
        else:
            serve.delete(APP_NAME)
            _shutdown_if_idle(serve)
        ray.shutdown()


def _proxy_callback() -> None:
    """Before a local Ray starts (its processes inherit this environment): Serve's HTTP proxies
    put :class:`~attnscope.serving.ray_serve_http.ReplicaGone` in front (Serve takes proxy
    middlewares only from this variable) and import it from this checkout."""
    root = str(Path(__file__).resolve().parents[2])
    os.environ.setdefault("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH", PROXY_CALLBACK)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def _running_serve(serve: ModuleType) -> Any:
    """The client of a Serve already running on the joined cluster, or None."""
    try:
        return serve.context._get_global_client(raise_if_no_controller_running=False)
    except Exception:  # noqa: BLE001 - no controller, or a Serve without this (private) call
        return None


def _start_serve(serve: ModuleType, settings: Settings) -> str:
    """Start Serve's proxies on the settings' host and port (on a local Ray with
    :class:`ReplicaGone` in front: :func:`_proxy_callback`). Serve already
    running on the cluster keeps its own HTTP options (Serve ignores new ones, issue 45.6: the
    port asked for was logged while the old one served): on the same port it is joined; on
    another port a leftover with no application is shut down and started afresh, and one that
    serves other applications is a ValueError naming its port. Returns "started" or "joined"."""
    client = _running_serve(serve)
    if client is not None:
        port = int(client.http_config.port)
        if port == settings.port:
            return f"joined the Serve running on port {port}"
        others = _other_applications(serve)
        if others:
            raise ValueError(
                f"Ray Serve on this cluster listens on port {port} for {', '.join(others)}; it cannot move to "
                f"--port {settings.port} while they run: use --port {port}, or stop them first"
            )
        logger.info("Serve on this cluster listens on port %d and runs nothing: restarting it on %d", port, settings.port)
        serve.shutdown()
    serve.start(http_options={"host": settings.host, "port": settings.port})
    return f"started Serve on port {settings.port}"


def _other_applications(serve: ModuleType) -> list[str]:
    return sorted(name for name in serve.status().applications if name != APP_NAME)


def _shutdown_if_idle(serve: ModuleType) -> None:
    """On a cluster we joined: once our application is deleted, Serve's controller and its
    proxies (one per node, ~650 MB, holding the port and answering 404) stay unless someone else
    still runs an application; shut Serve down when nobody does."""
    try:
        others = _other_applications(serve)
    except Exception as err:  # noqa: BLE001 - a cluster going away: nothing left to stop
        logger.warning("could not read Serve's status after deleting %s: %s", APP_NAME, err)
        return
    if others:
        logger.info("Serve keeps running for the other application(s) on the cluster: %s", ", ".join(others))
        return
    logger.info("no other Serve application on the cluster: shutting Serve down (its controller and proxies)")
    serve.shutdown()


def _check_local(settings: Settings) -> None:
    """On this machine, a device or GPU it does not have fails here, in one line, not as a
    replica that retries its constructor or waits for a GPU forever (ValueError: the command
    line prints it as one line)."""
    import torch

    from attnscope.device import resolve_device

    resolve_device(settings.device)  # ValueError naming the device
    if settings.ray_replica_gpus > 0 and not torch.cuda.is_available():
        raise ValueError("--replica-gpus needs a GPU, and this machine has none")


def _stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM (the main thread waits on it)."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop
