"""``model.analyze(sentences)``'s result: every head's statistics and role over the sentences, as
``POST /api/analyze`` answers them (the numbers of ``attnscope analyze``), with numpy and pandas
views; and the corpus given as a list of sentences or a file (read here, standard library only)."""

from __future__ import annotations

import copy
import gzip
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.api.answer import JsonAnswer
from attnscope.extras import require

if TYPE_CHECKING:
    import pandas

__all__ = ["HeadAnalysis", "analyze_fields", "sentences_of"]


def analyze_fields(sentences: Any, references: Any, alignments: Any) -> dict[str, Any]:
    """The corpus fields of an analyze body (lists; files read), the ones not given left out."""
    given = {"sentences": sentences, "references": references, "alignments": alignments}
    found = {name: sentences_of(value, name) for name, value in given.items()}
    return {name: value for name, value in found.items() if value is not None}


def sentences_of(given: Sequence[str] | Path | None, what: str) -> list[str] | None:
    """A list of lines: ``given`` itself, or the lines of the file a :class:`~pathlib.Path` names
    (plain or gzipped, like ``attnscope analyze --corpus``). A bare ``str`` is refused: it could
    be either a sentence or a file name."""
    if given is None:
        return None
    if isinstance(given, str):
        raise TypeError(f"{what}: give a list of sentences, or a pathlib.Path for a file (not one str)")
    if isinstance(given, Path):
        if not given.is_file():
            raise FileNotFoundError(f"{what}: no such file: {given}")
        raw = given.read_bytes()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
        return [line.rstrip("\n") for line in io.StringIO(text, newline=None)]  # as the command reads it
    return [str(s) for s in given]


class HeadAnalysis(JsonAnswer):
    """The answer of ``analyze``: ``to_dict()`` is the REST JSON; ``heads`` one summary per kind
    × layer × head (role, ``<stat>_mean``, ``_q10``/``_q50``/``_q90``, ``alignment_f1``)."""

    @property
    def heads(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._answer["heads"])

    @property
    def roles(self) -> dict[tuple[str, int, int], str]:
        """(kind, layer, head) -> role."""
        return {(h["kind"], h["layer"], h["head"]): h["role"] for h in self._answer["heads"]}

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys(h["kind"] for h in self._answer["heads"]))

    def grid(self, statistic: str, kind: str = "cross") -> np.ndarray:
        """``[layers, heads]`` one statistic of ``kind``'s heads (``entropy_mean``,
        ``eos_share_q50``, ``alignment_f1``, ``role_score`` ...); NaN where it does not apply."""
        heads = [h for h in self._answer["heads"] if h["kind"] == kind]
        if not heads:
            raise KeyError(f"no {kind!r} heads; this analysis has {', '.join(self.kinds) or 'none'}")
        if statistic not in heads[0]:
            raise KeyError(f"no statistic {statistic!r}; there are {', '.join(k for k in heads[0] if k not in ('kind', 'layer', 'head', 'role'))}")
        out = np.full((1 + max(h["layer"] for h in heads), 1 + max(h["head"] for h in heads)), np.nan)
        for h in heads:
            value = h.get(statistic)
            out[h["layer"], h["head"]] = np.nan if value is None else value
        return out

    def to_pandas(self) -> pandas.DataFrame:
        """One row per head (``attnscope analyze``'s heads.parquet)."""
        pd = require("pandas", "notebook", purpose="to_pandas()")

        return pd.DataFrame(self._answer["heads"])

    def rows(self) -> pandas.DataFrame:
        """One row per sentence × kind × layer × head (its rows.parquet; ``sentence`` indexes
        the sentences given); needs ``rows=True`` (the default)."""
        pd = require("pandas", "notebook", purpose="rows()")

        columns = self._answer.get("rows")
        if columns is None:
            raise KeyError("no rows: analyze(..., rows=True) returns them")
        return pd.DataFrame(columns)

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for role in self.roles.values():
            counts[role] = counts.get(role, 0) + 1
        said = ", ".join(f"{n} {role}" for role, n in sorted(counts.items()))
        return f"<HeadAnalysis {self.model}: {self._answer['sentences']} sentences ({self._answer['mode']}); {said}>"
