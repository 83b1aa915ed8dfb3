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
# Priced at ~1.4 s at the scheduler's prior rate (under the 2 s deadline, so admitted): it runs
# long enough on this machine for the test to see it start and leave
ADMITTED_ATTRIBUTION = {**LONG_ATTRIBUTION, "target": "a play in " * 5}


@pytest.fixture(scope="module")
def strict_server(slow_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("stopping") / "server.log"
    env = {"ATTNSCOPE_INFERENCE_THREADS": "1", "ATTNSCOPE_REQUEST_TIMEOUT_S": "2",
           "ATTNSCOPE_MAX_ATTRIBUTION_COST": "1000000000", "ATTNSCOPE_MAX_ROUTE_FLOATS": "10000000000"}  # fmt: skip
    with server_process(slow_models_dir, log, env=env) as (url, _):
        yield url, log


def _cancelled(url: str, reason: str) -> float:
    return metric(url, "attnscope_decodes_cancelled_total", f'{{reason="{reason}"}}')


def test_an_attribution_that_cannot_meet_its_deadline_is_refused_before_it_starts(strict_server: tuple[str, Path]) -> None:
    """Issue 45: such an attribution used to be admitted at no cost and stopped at its deadline
    (504); priced, it is a 503 with Retry-After and no slot is taken."""
    url, _ = strict_server
    before = metric(url, "attnscope_batch_texts_count")
    r = httpx.post(f"{url}/api/attribution", json=LONG_ATTRIBUTION, timeout=120)
    assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1, r.text[:300]
    assert "ATTNSCOPE_REQUEST_TIMEOUT_S" in r.json()["detail"]
    assert metric(url, "attnscope_batch_texts_count") == before


def test_an_attribution_whose_client_left_stops(strict_server: tuple[str, Path]) -> None:
    url, log = strict_server
    before = _cancelled(url, "client_gone")
    sock = send_raw(url, "/api/attribution", ADMITTED_ATTRIBUTION)
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
