"""``attnscope serve --ray``: the app as a Ray Serve deployment on a local Ray (one replica, one
CPU), over real HTTP: it answers like the plain server, reports ready only once its replica has
loaded the models, and leaves no Ray process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from attnscope.cli import main
from attnscope.config import Settings
from attnscope.engine.service import ModelService
from attnscope.engine.testsets import Batch, score_batch
from attnscope.extras import MissingExtra
from attnscope.repository import load_model_folder
from attnscope.serving.ray_serve import build, deployment_options, import_ray, replica_health
from attnscope.testing import (
    REPO_ROOT,
    TINY_KINDS,
    TINY_PAIRS,
    build_tiny_models,
    free_port,
    running_server,
)
from attnscope.translator import Translator

REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("/api/translate", {"model": "en-de-transformer", "text": "a dog runs on the grass"}),
    ("/api/translate", {"model": "en-de-transformer", "text": "two men", "beam_size": 3, "return_beam": True}),
    ("/api/translate", {"model": "en-de-rnn-additive", "text": "a little girl", "precision": 3}),
    ("/api/translate/batch", {"model": "en-de-transformer", "texts": ["a man", "a dog runs"]}),
    ("/api/align", {"model": "en-de-rnn-additive", "text": "a dog", "target": "ein hund"}),
]


WIDE_WINDOW = {"ATTNSCOPE_BATCH_WINDOW_MS": "300"}  # concurrent requests surely meet in one micro-batch


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ray-models")
    build_tiny_models(root, kinds=[k for k in TINY_KINDS if k[0] in ("transformer", "rnn-additive")])
    return root


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(MissingExtra, match=r"serve --ray needs ray .*: pip install 'attnscope\[ray\]'"):
        import_ray()


def test_replica_bounds_become_serve_options() -> None:
    fixed = deployment_options(Settings(ray_min_replicas=2, ray_max_replicas=2, ray_replica_gpus=0.5))
    assert fixed["num_replicas"] == 2 and "autoscaling_config" not in fixed
    assert fixed["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 0.5}
    scaled = deployment_options(Settings(ray_min_replicas=1, ray_max_replicas=4, max_queue=10, inference_threads=2))
    assert scaled["autoscaling_config"]["min_replicas"] == 1 and scaled["autoscaling_config"]["max_replicas"] == 4
    assert scaled["max_ongoing_requests"] == 12  # the app's own queue and slots, where requests batch


def test_max_below_min_is_a_clear_error_before_ray_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--ray", "--min-replicas", "3", "--max-replicas", "2"]) == 2
    assert "ray_max_replicas (2) is below ray_min_replicas (3)" in capsys.readouterr().err


def test_health_check_follows_readiness(two_models: Path) -> None:
    service = ModelService(Settings(models_dir=two_models, device="cpu"))
    with pytest.raises(RuntimeError, match="loading"):
        replica_health(service)
    service.load_all()
    replica_health(service)  # ready: healthy
    service.stop()
    with pytest.raises(RuntimeError, match="stopping"):
        replica_health(service)


def test_a_replica_without_models_is_unhealthy(tmp_path: Path) -> None:
    """Issue 45.6: a replica whose models_dir is missing was ready and healthy with 0 models."""
    service = ModelService(Settings(models_dir=tmp_path / "missing", device="cpu"))
    service.load_all()
    with pytest.raises(RuntimeError, match="serves no model"):
        replica_health(service)
    service.stop()


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc: Ray's GCS, raylet, workers, proxy, replicas)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def ray_server(two_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[dict[str, Any]], set[int]]]:
    """``serve --ray`` started here; yields its URL, every 200-or-not /api/ready answer seen while
    it started (JSON bodies of the 200s), and its processes, and checks they all end after SIGTERM."""
    port, log = free_port(), tmp_path_factory.mktemp("ray-log") / "serve.log"
    results = {"ATTNSCOPE_TESTSETS_DIR": str(tmp_path_factory.mktemp("ray-testsets"))}  # not the shared temp folder
    command = [sys.executable, "-m", "attnscope.cli", "serve", "--ray", "--port", str(port), "--models-dir", str(two_models), "--only-models-dir", "--device", "cpu"]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1", **WIDE_WINDOW, **results})
    url, seen = f"http://127.0.0.1:{port}", []
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"not ready in 120 s:\n{log.read_text()[-4000:]}"
            try:
                answer = httpx.get(f"{url}/api/ready", timeout=5)
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            seen.append({"status_code": answer.status_code, **(answer.json() if answer.status_code == 200 else {})})
            if answer.status_code == 200:
                break
            time.sleep(0.2)
        processes = _descendants(process.pid)
        yield url, seen, processes
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    assert process.returncode == 0, log.read_text()[-4000:]
    deadline = time.monotonic() + 20
    while (left := {p for p in processes if _alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes left after shutdown: {sorted(left)}"


def _without_timing(value: Any) -> Any:
    """An answer with its ``timing_ms`` (the decode's wall time) taken out."""
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return {k: v for k, v in value.items() if k != "timing_ms"}


def test_ray_serve_answers_like_the_plain_server(
    ray_server: tuple[str, list[dict[str, Any]], set[int]], two_models: Path, tmp_path: Path
) -> None:
    url, seen, processes = ray_server
    assert seen[-1] == {"status_code": 200, "status": "ready", "models": 2, "unavailable": 0, "loaded": 2, "total": 2}
    assert all(s["status_code"] != 200 for s in seen[:-1])  # never ready before the replica loaded
    assert len(processes) > 3  # Ray's own processes and the replica: the test below checks they end
    with running_server(two_models, tmp_path / "plain.log") as plain:
        assert httpx.get(f"{url}/api/models").json() == httpx.get(f"{plain}/api/models").json()
        for path, body in REQUESTS:
            on_ray, alone = httpx.post(f"{url}{path}", json=body, timeout=30), httpx.post(f"{plain}{path}", json=body, timeout=30)
            assert on_ray.status_code == alone.status_code == 200, (path, on_ray.text[:300])
            assert _without_timing(on_ray.json()) == _without_timing(alone.json()), (path, body)
        bad = {"model": "nope", "text": "a dog"}
        assert httpx.post(f"{url}/api/translate", json=bad).json() == httpx.post(f"{plain}/api/translate", json=bad).json()
        stream = {"model": "en-de-transformer", "text": "a dog", "max_length": 3}
        events = [httpx.post(f"{base}/api/translate/stream", json=stream, timeout=30) for base in (url, plain)]
        assert events[0].headers["content-type"].startswith("text/event-stream")
        assert [re.sub(r'"timing_ms":[0-9.]+', "", e.text) for e in events] == [re.sub(r'"timing_ms":[0-9.]+', "", events[1].text)] * 2
        for page in ("/", "/models", "/openapi.json"):
            assert httpx.get(f"{url}{page}").text == httpx.get(f"{plain}{page}").text, page


def test_each_answer_through_serve_has_one_request_id(ray_server: tuple[str, list[dict[str, Any]], set[int]]) -> None:
    """Issue 45.6: every answer carried two ``x-request-id`` headers (the proxy's and the app's)."""
    url = ray_server[0]
    mine = httpx.get(f"{url}/api/health", headers={"x-request-id": "abc123"})
    assert mine.headers.get_list("x-request-id") == ["abc123"]
    theirs = httpx.post(f"{url}/api/translate", json={"model": "nope", "text": "a dog"})
    assert theirs.status_code == 404 and len(theirs.headers.get_list("x-request-id")) == 1


def test_a_test_set_job_through_serve_runs_on_ray_and_scores_as_in_process(
    ray_server: tuple[str, list[dict[str, Any]], set[int]], two_models: Path
) -> None:
    """A Test sets job posted to ``serve --ray`` over HTTP runs its batches on an actor of the
    server's own Ray, and its rows are what the in-process scoring function gives."""
    url = ray_server[0]
    sources, references = [s for s, _ in TINY_PAIRS], [t for _, t in TINY_PAIRS]
    posted = httpx.post(f"{url}/api/testsets/jobs", json={"model": "en-de-transformer", "sources": sources,
                                                           "references": references}, timeout=30)  # fmt: skip
    assert posted.status_code == 202, posted.text
    assert posted.json()["on_ray"] is True
    job: dict[str, Any] = {}
    for _ in range(1200):  # a bound on polls, not a timing assertion
        job = httpx.get(f"{url}/api/testsets/jobs/{posted.json()['id']}", timeout=30).json()
        if job["state"] not in ("running", "cancelling"):
            break
        time.sleep(0.25)
    assert job["state"] == "done" and job["done"] == job["total"] == len(sources), job
    rows = httpx.get(f"{url}/api/testsets/jobs/{job['id']}/rows", timeout=30).json()["rows"]
    translator = Translator(load_model_folder(two_models / "en-de-transformer"))
    expected = score_batch(translator, Batch(0, sources, references, None))
    assert [r["index"] for r in rows] == list(range(len(sources)))
    for key in ("output", "bleu", "chrf", "flags", "source_words", "output_words"):
        assert [r[key] for r in rows] == [r[key] for r in expected], key
    assert [r["mean_logprob"] for r in rows] == pytest.approx([r["mean_logprob"] for r in expected], abs=1e-3)
    listed = httpx.get(f"{url}/api/testsets/jobs", timeout=30).json()["jobs"]
    assert [j["on_ray"] for j in listed if j["id"] == job["id"]] == [True]


def test_builder_takes_settings_as_serve_run_args() -> None:
    """``serve run attnscope.serving.ray_serve:build models_dir=... ray_max_replicas=3`` (and a RayService's
    ``args``): strings, validated as Settings, become the deployment's options (no Ray started)."""
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

    args = {"models_dir": "/srv/models", "ray_max_replicas": "3"}
    built = call_user_app_builder_with_args_if_necessary(build, args)  # type: ignore[arg-type]
    scaling = built._bound_deployment._deployment_config.autoscaling_config
    assert scaling is not None and (scaling.min_replicas, scaling.max_replicas) == (1, 3)


def _batches(url: str) -> tuple[float, float]:
    """(decodes, requests they served) from the replica's /metrics, through Serve's proxy."""
    text = httpx.get(f"{url}/metrics").text
    count = re.search(r"^attnscope_batch_requests_count (\S+)$", text, re.M)
    total = re.search(r"^attnscope_batch_requests_sum (\S+)$", text, re.M)
    assert count and total, text[:2000]
    return float(count[1]), float(total[1])


def test_concurrent_requests_batch_inside_the_replica(ray_server: tuple[str, list[dict[str, Any]], set[int]]) -> None:
    url = ray_server[0]
    decodes, served = _batches(url)
    body = {"model": "en-de-transformer", "text": "a dog runs", "max_length": 5}
    answers: list[int] = []
    threads = [threading.Thread(target=lambda: answers.append(httpx.post(f"{url}/api/translate", json=body, timeout=60).status_code)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert answers == [200] * 6
    after = _batches(url)
    assert after[1] - served == 6 and after[0] - decodes < 6  # fewer decodes than requests: they batched


def test_a_gpu_this_machine_lacks_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Locally, ``--replica-gpus`` without a GPU fails before Ray starts (else the replica would
    wait for a GPU forever)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["serve", "--ray", "--replica-gpus", "1", "--device", "cpu"]) == 2
    assert capsys.readouterr().err.strip() == "attnscope serve: error: --replica-gpus needs a GPU, and this machine has none"
def test_builder_arguments_with_typos_are_refused() -> None:
    """Issue 45.6: ``ray_max_replica=4`` was ignored (the default, 1 replica, ran)."""
    from attnscope.serving.ray_serve import build

    with pytest.raises(ValueError, match=r"ray_max_replica \(did you mean ray_max_replicas"):
        build({"ray_max_replica": "4"})


class _FakeServe:
    """What ``run`` calls of ray.serve, recorded; ``apps``: the applications left after ours."""

    def __init__(self, apps: list[str]) -> None:
        self.calls: list[str] = []
        self.apps = apps

    def start(self, **_: object) -> None:
        self.calls.append("start")

    def run(self, *_: object, **__: object) -> None:
        self.calls.append("run")

    def delete(self, name: str) -> None:
        self.calls.append(f"delete {name}")

    def shutdown(self) -> None:
        self.calls.append("shutdown")

    def status(self) -> Any:
        return type("Status", (), {"applications": {a: None for a in self.apps}})()


@pytest.mark.parametrize(("others", "shut"), [([], True), (["someone-else"], False)])
def test_leaving_a_cluster_stops_serve_unless_others_use_it(
    monkeypatch: pytest.MonkeyPatch, others: list[str], shut: bool
) -> None:
    """Issue 45.6: after SIGTERM, ``serve --ray ADDRESS`` deleted its application but left Serve's
    controller and a proxy per node holding the port (and answering 404)."""
    import threading
    import types

    from attnscope.serving import ray_serve

    serve = _FakeServe(others)
    fake_ray = types.SimpleNamespace(init=lambda **_: None, shutdown=lambda: serve.calls.append("ray.shutdown"))
    stopped = threading.Event()
    stopped.set()
    monkeypatch.setattr(ray_serve, "import_ray", lambda: (fake_ray, serve))
    monkeypatch.setattr(ray_serve, "join_ray", lambda *_, **__: None)  # no cluster is ever contacted
    monkeypatch.setattr(ray_serve, "_stop_on_signals", lambda: stopped)
    monkeypatch.setattr(ray_serve, "application", lambda settings: object())
    ray_serve.run("ray://cluster:10001", models_dir="models")
    assert serve.calls[:3] == ["start", "run", f"delete {ray_serve.APP_NAME}"]
    assert ("shutdown" in serve.calls) is shut and serve.calls[-1] == "ray.shutdown"
