"""The OpenAPI schema against the real server, by schemathesis (issue 35): requests generated from
the schema, valid and not, over HTTP; every answer is never a 5xx and matches what the schema
declares for its status (body, content type, headers). Bounded: a fixed seed and a few examples
per operation (the 10-minute run is noted in docs/api.md, *Reliability probe*)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.specs.openapi import checks  # noqa: E402

from attnscope.testing import running_server  # noqa: E402

EXAMPLES = 200  # across every operation, per mode

# What each answer must keep. Left out: positive_data_acceptance (a schema-valid request may be
# refused 422 by admission, e.g. a text over the model's token limit, or 404 for a model id
# that no folder holds) and the stateful/auth checks (the API has no resources or auth).
CHECKS = [
    schemathesis.checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
    checks.negative_data_rejection,
]


@pytest.fixture(scope="module")
def api_schema(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    with running_server(tiny_models_dir, tmp_path_factory.mktemp("schemathesis") / "server.log") as url:
        yield schemathesis.openapi.from_url(f"{url}/openapi.json")


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_every_operation_answers_as_declared(api_schema: object, mode: str) -> None:
    """Valid requests (positive) and invalid ones (negative: each must be refused 4xx) for every
    operation, drawn from one fixed seed."""
    strategy = api_schema.as_strategy(generation_mode=GenerationMode(mode))  # type: ignore[attr-defined]

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    def check(case: object) -> None:
        case.call_and_validate(checks=CHECKS)  # type: ignore[attr-defined]

    check()
