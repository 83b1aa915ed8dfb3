"""A :class:`~attnscope.api.results.Result`'s attention as a pandas table or an xarray Dataset."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.api.axes import KIND_AXES
from attnscope.extras import require

if TYPE_CHECKING:
    import pandas
    import xarray


COLUMNS = ["kind", "layer", "head", "query", "query_token", "key", "key_token", "weight"]
_AXIS_NAMES = {"source_tokens": "source", "target_tokens": "target", "decoder_input_tokens": "decoder_input"}


def long_frame(result: Any, kinds: list[str] | None = None) -> pandas.DataFrame:
    """One row per weight: ``kind, layer, head, query, query_token, key, key_token, weight``
    (indices 0-based, as in the REST answer)."""
    pd = require("pandas", "notebook", purpose="to_pandas()")
    parts = []
    for kind in kinds or result.kinds:
        weights = result.attention[kind]  # [layers, heads, query, key]
        queries, keys = result.axes(kind)
        layers, heads, q, k = weights.shape
        layer, head, query, key = (a.ravel() for a in np.indices(weights.shape))
        parts.append(
            pd.DataFrame(
                {
                    "kind": pd.Categorical([kind] * weights.size, categories=list(KIND_AXES)),
                    "layer": layer, "head": head,
                    "query": query, "query_token": np.asarray(queries, dtype=object)[query],
                    "key": key, "key_token": np.asarray(keys, dtype=object)[key],
                    "weight": weights.ravel(),
                }
            )  # fmt: skip
        )
    if not parts:
        return pd.DataFrame({c: [] for c in COLUMNS})
    return pd.concat(parts, ignore_index=True)


def dataset(result: Any) -> xarray.Dataset:
    """One variable per kind, dims ``(layer|encoder_layer, head, <query axis>, <key axis>)``
    named after the token lists (``target``, ``source``, ``decoder_input``; ``source_key`` for
    encoder_self's keys), token strings as coordinates beside the positions."""
    xr = require("xarray", "notebook", purpose="to_xarray()")
    variables: dict[str, Any] = {}
    coords: dict[str, Any] = {}
    for kind in result.kinds:
        query_list, key_list, layer_dim = KIND_AXES[kind]
        query_dim = _AXIS_NAMES[query_list]
        key_dim = _AXIS_NAMES[key_list] + ("_key" if key_list == query_list else "")
        variables[kind] = ((layer_dim, "head", query_dim, key_dim), result.attention[kind])
        for dim, tokens in ((query_dim, result[query_list]), (key_dim, result[key_list])):
            coords[dim] = np.arange(len(tokens))
            coords[f"{dim}_token"] = (dim, list(tokens))
    attrs = {"model": result.model, "translation": result.text, "logprob": result.logprob}
    return xr.Dataset(variables, coords=coords, attrs=attrs)
