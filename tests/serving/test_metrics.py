"""``/metrics`` stays bounded whatever clients send (issue 35: 3,000 requests with invented
methods grew it from 30 KB to 48.6 MB), and can be closed with a token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from attnscope.testing import running_server


def test_invented_methods_and_paths_add_no_series(http: httpx.Client) -> None:
    http.get("/api/health")
    before = http.get("/metrics").text
    for i in range(40):
        http.request(f"FOO{i}X", "/api/health")
        http.request(f"BAR{i}", f"/made/up/path/{i}")
        http.get(f"/api/made-up-{i}")
    after = http.get("/metrics").text
    assert "FOO" not in after and "BAR" not in after and "made" not in after
    assert 'method="other"' in after
    series = {line.split(" ")[0] for line in after.splitlines() if line.startswith("attnscope_requests_total")}
    assert len(series) < 40  # a handful of route/method/status combinations, not one per request
    assert len(after) < len(before) + 20_000


def test_metrics_token(client_for: Any, tiny_models_dir: Path) -> None:
    with client_for(tiny_models_dir, metrics_token="s3cret") as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"authorization": "Bearer nope"}).status_code == 401
        ok = client.get("/metrics", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and "attnscope_requests_total" in ok.text
        assert client.get("/api/health").status_code == 200  # only /metrics is closed


def test_two_workers_export_every_workers_counts(tiny_models_dir: Path, tmp_path: Path) -> None:
    """With ``--workers 2`` each worker counted its own requests and /metrics showed whichever
    answered; in multiprocess mode it adds both up."""
    with running_server(tiny_models_dir, tmp_path / "server.log", args=("--workers", "2")) as url:
        for _ in range(12):
            assert httpx.get(f"{url}/api/health", headers={"connection": "close"}).status_code == 200
        text = httpx.get(f"{url}/metrics", headers={"connection": "close"}).text
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("attnscope_requests_total{") and 'route="/api/health"' in line and 'status="200"' in line
    )
    assert counted >= 12, text[:2000]
