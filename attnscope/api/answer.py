"""The one thing every Python API result is: a REST answer held as its JSON, with the body it
answered (:mod:`attnscope.api.results`, :mod:`attnscope.api.vision`, :mod:`attnscope.api.analysis`
derive their numpy views from it)."""

from __future__ import annotations

import copy
from typing import Any


class JsonAnswer:
    """``answer``: the REST answer's JSON (a dict); ``request``: the body it answered."""

    def __init__(self, answer: dict[str, Any], request: dict[str, Any] | None = None) -> None:
        self._answer = answer
        self.request = request or {}

    def to_dict(self) -> dict[str, Any]:
        """The REST answer's JSON (a deep copy: changing it changes nothing here)."""
        return copy.deepcopy(self._answer)

    def __getitem__(self, field: str) -> Any:
        """A field of the REST answer as it is in its JSON (``result["beam"]``)."""
        return self._answer[field]

    @property
    def model(self) -> str:
        return str(self._answer["model"])
