"""``attribute()`` in process: the ``/api/attribution`` route's own function, called with a
request that never disconnects (its job, checks and answer live in the route today)."""

from __future__ import annotations

import asyncio
import json
from typing import Any


class _Connected:
    """The one thing the route reads of its request: ``receive()``, which never says 'gone'."""

    async def receive(self) -> dict[str, Any]:
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}


async def attribute(service: Any, body: Any) -> dict[str, Any]:
    """The route's answer to ``body`` (an ``AttributionRequest``) as its JSON."""
    from attnscope.serving.attribution import attribution

    answer = await attribution(body, service, _Connected())  # type: ignore[arg-type]
    result: dict[str, Any] = json.loads(answer.model_dump_json())
    return result
