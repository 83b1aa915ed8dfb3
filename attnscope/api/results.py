"""What the Python API returns: the REST answer, held as its JSON, with numpy views of it.

:class:`Result` is one translate or align answer. ``to_dict()`` is the REST answer's JSON
itself (the in-process model builds it with the server's own answer code and serialiser), so
every other accessor is derived from the same numbers a page or a client of the server sees:
``attention[kind]`` as a float64 array ``[layers, heads, query, key]``, the tokens of each axis,
the log-probabilities, the explanations, the beam tree. Values carry the request's
``precision`` (6 decimals unless asked otherwise), as over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.api.answer import JsonAnswer
from attnscope.api.axes import KIND_AXES

if TYPE_CHECKING:
    import pandas
    import torch
    import xarray

__all__ = ["AttributionResult", "Result", "KIND_AXES"]



Fetch = Callable[[str, str, int, int], np.ndarray]  # (attention_id, kind, layers, precision) -> [layers, heads, query, key]


class OnDemand(Mapping[str, np.ndarray]):
    """The attention of an ``"attention": "on_demand"`` answer: each kind fetched from where the
    answer was made the first time it is read (``GET /api/attention/{id}/{kind}/{layer}`` for a
    server, the service's store in process), then kept; the same numbers an inline answer holds."""

    def __init__(self, answer: dict[str, Any], fetch: Fetch, precision: int) -> None:
        self._id = str(answer["attention_id"])
        self._shapes: dict[str, Any] = dict(answer.get("attention_shapes") or {})
        self._fetch = fetch
        self._precision = precision
        self._got: dict[str, np.ndarray] = {}

    def __getitem__(self, kind: str) -> np.ndarray:
        if kind not in self._shapes:
            raise KeyError(kind)
        if kind not in self._got:
            layers = int(self._shapes[kind]["layers"])
            self._got[kind] = np.asarray(self._fetch(self._id, kind, layers, self._precision), dtype=np.float64)
        return self._got[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._shapes)

    def __len__(self) -> int:
        return len(self._shapes)


class _Answer(JsonAnswer):
    """A REST answer held as its JSON: what every result shares.

    ``answer``: the REST answer's JSON (a dict); ``request``: the body it answered; ``fetch``:
    how to read an on-demand answer's attention where it was made (given by the door)."""

    def __init__(self, answer: dict[str, Any], request: dict[str, Any] | None = None, fetch: Fetch | None = None) -> None:
        super().__init__(answer, request)
        self._fetch = fetch

    @property
    def text(self) -> str:
        """The translation (for ``align``: the given target)."""
        return str(self._answer["translation"])

    @property
    def source_tokens(self) -> list[str]:
        return list(self._answer["source_tokens"])

    @property
    def target_tokens(self) -> list[str]:
        return list(self._answer["target_tokens"])


class Result(_Answer):
    """One answer of ``translate``, ``translate_batch`` or ``align``.

    ``answer``: the REST answer's JSON (a dict); ``request``: the body it answered."""

    # -- the answer's fields --------------------------------------------------------------

    translation = _Answer.text

    @property
    def source_text(self) -> str | None:
        return self.request.get("text")

    @property
    def decoder_input_tokens(self) -> list[str]:
        return list(self._answer["decoder_input_tokens"])

    @property
    def logprob(self) -> float:
        return float(self._answer["logprob"])

    @property
    def target_logprobs(self) -> np.ndarray:
        """``[target token]`` log-probability of each target token."""
        return np.asarray(self._answer["target_logprobs"], dtype=np.float64)

    @property
    def on_demand(self) -> bool:
        """Whether the answer was asked with ``attention="on_demand"`` (its matrices are read
        from where it was made, on first use of :attr:`attention`)."""
        return bool(self._answer.get("attention_id")) and not self._answer["attention"]

    @property
    def kinds(self) -> list[str]:
        """The attention kinds this answer holds (none for an RNN without attention)."""
        if self.on_demand:
            return list(self._answer.get("attention_shapes") or {})
        return list(self._answer["attention"])

    @cached_property
    def attention(self) -> Mapping[str, np.ndarray]:
        """Each kind's weights, ``[layers, heads, query, key]`` (see :meth:`axes`); an on-demand
        answer's are fetched per kind when first read."""
        if self.on_demand and self._fetch is not None:
            return OnDemand(self._answer, self._fetch, int(self.request.get("precision", 6)))
        return {kind: np.asarray(m, dtype=np.float64) for kind, m in self._answer["attention"].items()}

    def inline(self) -> Result:
        """This result with its attention in the answer (an on-demand one's fetched): what the
        views draw and an inline answer's ``to_dict()`` holds."""
        if not self.on_demand:
            return self
        answer = {**self._answer, "attention": {kind: self.attention[kind].tolist() for kind in self.kinds}}
        return Result(answer, self.request)

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """The tokens along ``kind``'s query and key axes."""
        query, key, _ = KIND_AXES[kind]
        return list(self._answer[query]), list(self._answer[key])

    @property
    def explanations(self) -> dict[str, Any] | None:
        """The ``explain`` methods' results as in the REST answer (None: none asked)."""
        return self._answer.get("explanations")

    def explanation(self, method: str, kind: str = "cross") -> np.ndarray:
        """One explanation as an array: ``norm`` ``[layers, heads, query, key]``; ``rollout``
        and ``value_zeroing`` ``[layers, query, key]``; for ``alti`` ``kind`` is one of its
        parts (``source``, ``target``, ``encoder``: ``[layers, query, key]``)."""
        found = self.explanations or {}
        value = found.get(method)
        if value is None:
            why = (found.get("unavailable") or {}).get(method, "not asked for (explain=[...])")
            raise KeyError(f"no {method!r} explanation: {why}")
        return np.asarray(value[kind], dtype=np.float64)

    @property
    def beam(self) -> dict[str, Any] | None:
        """The beam search tree (with ``return_beam=True``)."""
        return self._answer.get("beam")

    @property
    def word_alignment(self) -> dict[str, Any] | None:
        return self._answer.get("word_alignment")

    def as_torch(self) -> dict[str, torch.Tensor]:
        """:attr:`attention` as float32 torch tensors ``[layers, heads, query, key]``."""
        import torch

        return {kind: torch.from_numpy(m.astype(np.float32)) for kind, m in self.attention.items()}

    # -- tables ---------------------------------------------------------------------------

    def to_pandas(self, kinds: list[str] | None = None) -> pandas.DataFrame:
        """Every weight as a row (long format): ``kind, layer, head, query, query_token, key,
        key_token, weight``; ``kinds`` limits the kinds (default: all of the answer's)."""
        from attnscope.api.frames import long_frame

        return long_frame(self, kinds)

    def to_xarray(self) -> xarray.Dataset:
        """One variable per kind, dims named by their token axes (``layer`` or
        ``encoder_layer``, ``head``, then ``target``/``source``/``decoder_input``, with the
        tokens as coordinates); needs ``pip install xarray``."""
        from attnscope.api.frames import dataset

        return dataset(self)

    # -- views ----------------------------------------------------------------------------

    def show(self, view: str = "heatmap", other: Result | None = None, **options: Any) -> Any:
        """The explorer's view in a notebook: ``"heatmap"`` (kind, layer and head controls),
        ``"heads"`` (every head of a kind), ``"beam"`` (the search tree, with
        ``return_beam=True``), ``"anatomy"`` (one step's scores, softmax and weights, with
        ``return_scores=True``; ``step=`` counts from 1, as the page's player) or ``"compare"``
        (this result and ``other`` side by side, and A − B where their tokens agree). Options:
        ``kind``, ``layer``, ``head``, ``width``, ``height``. Needs ``attnscope[notebook]``."""
        from attnscope.widget import view_widget

        return view_widget(self.inline(), view, None if other is None else other.inline(), **options)

    def to_html(self, path: str | Path | None = None, view: str = "heatmap", other: Result | None = None,
                **options: Any) -> str:  # fmt: skip
        """The same view as one self-contained HTML page (scripts and Plotly.js inlined, works
        offline); written to ``path`` when given. Returns the HTML."""
        from attnscope.widget import standalone_html

        html = standalone_html(self.inline(), view, None if other is None else other.inline(), **options)
        if path is not None:
            Path(path).write_text(html, encoding="utf-8")
        return html

    def figure(self, view: str = "heatmap", other: Result | None = None, **options: Any) -> Any:
        """``"heatmap"``, ``"heads"`` or ``"compare"`` as a ``plotly.graph_objects.Figure`` (the
        page's image export, built in Python: edit it, or ``write_image`` it)."""
        from attnscope.widget.figures import figure

        return figure(self, view, other, **options)

    def save(self, path: str | Path, view: str = "heatmap", other: Result | None = None, **options: Any) -> Path:
        """Write a view to ``path``, by its suffix: ``.html`` the interactive page (every view,
        :meth:`to_html`); ``.png``, ``.svg``, ``.pdf``, ``.jpg``, ``.webp`` the static figure of
        :meth:`figure` (``heatmap``, ``heads``, ``compare``), through plotly and kaleido
        (``pip install 'attnscope[notebook]'``; kaleido drives a Chrome or Chromium)."""
        from attnscope.widget.figures import write_figure

        path = Path(path)
        if path.suffix.lower() in (".html", ".htm"):
            self.to_html(path, view, other, **options)
        else:
            write_figure(self.figure(view, other, **options), path)
        return path

    def __repr__(self) -> str:
        if self.on_demand:  # its shapes, without fetching the matrices
            found = self._answer.get("attention_shapes") or {}
            dims = {k: (v["layers"], v["heads"], v["rows"], v["columns"]) for k, v in found.items()}
        else:
            dims = {k: m.shape for k, m in self.attention.items()}
        shapes = ", ".join(f"{k} {'×'.join(map(str, shape))}" for k, shape in dims.items())
        return f"<Result {self.model}: {self.text!r} logprob={self.logprob:.3f} attention: {shapes or 'none'}>"


class AttributionResult(_Answer):
    """One ``attribute`` answer: gradient attribution beside the cross-attention."""

    @property
    def input_x_gradient(self) -> np.ndarray:
        """``[target, source]`` input × gradient, rows summing to 1."""
        return np.asarray(self._answer["input_x_gradient"], dtype=np.float64)

    @property
    def integrated_gradients(self) -> np.ndarray:
        """``[target, source]`` integrated gradients, rows summing to 1."""
        return np.asarray(self._answer["integrated_gradients"], dtype=np.float64)

    @property
    def cross_attention(self) -> np.ndarray | None:
        """``[layers, heads, target, source]``; None for a model without attention."""
        cross = self._answer.get("cross_attention")
        return None if cross is None else np.asarray(cross, dtype=np.float64)

    def correlation(self, method: str = "integrated_gradients") -> np.ndarray | None:
        """``[layers, heads]`` Spearman ρ of each head with ``method`` (NaN where undefined)."""
        found = self._answer.get("correlation")
        if found is None:
            return None
        return np.asarray([[np.nan if v is None else v for v in row] for row in found[method]], dtype=np.float64)

    def __repr__(self) -> str:
        return f"<AttributionResult {self._answer['model']}: {self.text!r}>"
