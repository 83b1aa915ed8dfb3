"""The beam limit is written once (attnscope.engine.schemas.MAX_BEAM): the API refuses a wider beam,
the pages' beam inputs carry it as their ``max``, and their JS reads it from there."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from attnscope.config import shipped
from attnscope.engine.schemas import MAX_BEAM


def test_api_refuses_a_beam_over_the_limit(client: TestClient) -> None:
    model = client.get("/api/models").json()["models"][0]["id"]
    response = client.post("/api/translate", json={"model": model, "text": "a man", "beam_size": MAX_BEAM + 1})
    assert response.status_code == 422
    assert "beam_size" in response.text


def test_pages_carry_the_limit(client: TestClient) -> None:
    for page, inputs in (("/", 2), ("/compare", 1)):
        html = client.get(page).text
        maxima = re.findall(r'<input[^>]*(?:id="beam"|data-role="beam-other")[^>]*>', html)
        assert len(maxima) == inputs
        assert all(f'max="{MAX_BEAM}"' in tag for tag in maxima)


def test_no_script_writes_the_limit_again() -> None:
    scripts = sorted((shipped("static") / "js").glob("*.js"))
    assert scripts
    for script in scripts:
        text = script.read_text(encoding="utf-8")
        assert not re.search(rf"Math\.min\(\s*{MAX_BEAM}\s*,", text), script.name
