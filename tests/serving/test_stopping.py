"""Long work stops when nobody wants it (issue 35: an attribution past its deadline answered 504
"stopped" while a core stayed busy ~9 s more, and one whose client left was logged 200 ok): the
deadline and a disconnect stop the backward passes, counted in /metrics, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from attnscope.testing import server_process

from .test_load import SLOW, metric, send_raw, slow_models_dir, wait_for

__all__ = ["slow_models_dir"]  # the fixture, shared with test_load

LONG_ATTRIBUTION = {"model": SLOW, "text": "a play in the snow", "target": "a play in " * 60, "steps": 128}


@pytest.fixture(scope="module")
def strict_server(slow_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("stopping") / "server.log"
    env = {"ATTNSCOPE_INFERENCE_THREADS": "1", "ATTNSCOPE_REQUEST_TIMEOUT_S": "2",
           "ATTNSCOPE_MAX_ATTRIBUTION_COST": "1000000000"}  # fmt: skip
    with server_process(slow_models_dir, log, env=env) as (url, _):
        yield url, log


def _cancelled(url: str, reason: str) -> float:
    return metric(url, "attnscope_decodes_cancelled_total", f'{{reason="{reason}"}}')


def test_an_attribution_past_its_deadline_stops(strict_server: tuple[str, Path]) -> None:
    url, log = strict_server
    before = _cancelled(url, "deadline")
    r = httpx.post(f"{url}/api/attribution", json=LONG_ATTRIBUTION, timeout=120)
    assert r.status_code == 504 and "deadline" in r.json()["detail"]
    wait_for(lambda: _cancelled(url, "deadline") > before, "the attribution to stop")
    wait_for(lambda: metric(url, "attnscope_decodes_running") == 0, "the slot to free up")
    assert "decode of 1 request(s) stopped" in log.read_text()


def test_an_attribution_whose_client_left_stops(strict_server: tuple[str, Path]) -> None:
    url, log = strict_server
    before = _cancelled(url, "client_gone")
    sock = send_raw(url, "/api/attribution", LONG_ATTRIBUTION)
    wait_for(lambda: metric(url, "attnscope_decodes_running") == 1, "the attribution to start")
    sock.close()
    wait_for(lambda: _cancelled(url, "client_gone") > before, "the attribution to stop")
    wait_for(lambda: metric(url, "attnscope_decodes_running") == 0, "the slot to free up")
    text = log.read_text()
    assert "POST /api/attribution" in text
    last = [line for line in text.splitlines() if "POST /api/attribution" in line][-1]
    assert "status=200" not in last and "outcome=ok" not in last


def test_a_short_attribution_still_answers(strict_server: tuple[str, Path]) -> None:
    url, _ = strict_server
    body: dict[str, Any] = {**LONG_ATTRIBUTION, "target": "a play", "steps": 4}
    r = httpx.post(f"{url}/api/attribution", json=body, timeout=120)
    assert r.status_code == 200, r.text
