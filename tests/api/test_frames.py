"""The tables are the arrays: to_pandas() pivots back to each kind's [layers, heads, query, key]
with the right tokens on each axis; to_xarray() holds the same numbers; as_torch() too."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnscope.api.local import LocalModel
from attnscope.api.results import Result


@pytest.fixture(scope="module")
def result(local_models: dict[str, LocalModel]) -> Result:
    return local_models["en-de-transformer"].translate("Two dogs play in the snow.", beam_size=2, max_length=6)


def test_long_table_pivots_back(result: Result) -> None:
    table = result.to_pandas()
    assert list(table.columns) == ["kind", "layer", "head", "query", "query_token", "key", "key_token", "weight"]
    assert len(table) == sum(m.size for m in result.attention.values())
    for kind, weights in result.attention.items():
        rows = table[table["kind"] == kind]
        back = np.zeros(weights.shape)
        back[rows["layer"], rows["head"], rows["query"], rows["key"]] = rows["weight"]
        np.testing.assert_array_equal(back, weights)
        queries, keys = result.axes(kind)
        assert (rows["query_token"].to_numpy() == np.asarray(queries, dtype=object)[rows["query"]]).all()
        assert (rows["key_token"].to_numpy() == np.asarray(keys, dtype=object)[rows["key"]]).all()
    # rows of attention sum to one, read from the table
    sums = table.groupby(["kind", "layer", "head", "query"], observed=True)["weight"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0, atol=1e-4)
    only = result.to_pandas(kinds=["cross"])
    assert set(only["kind"]) == {"cross"}


def test_xarray_and_torch(result: Result) -> None:
    data = result.to_xarray()
    np.testing.assert_array_equal(data["cross"].to_numpy(), result.attention["cross"])
    assert data["cross"].dims == ("layer", "head", "target", "source")
    assert data["encoder_self"].dims == ("encoder_layer", "head", "source", "source_key")
    assert list(data["source_token"].to_numpy()) == result.source_tokens
    picked = data["decoder_self"].isel(layer=0, head=1)
    np.testing.assert_array_equal(picked.to_numpy(), result.attention["decoder_self"][0, 1])
    tensors = result.as_torch()
    assert tensors["cross"].dtype == torch.float32
    np.testing.assert_allclose(tensors["cross"].numpy(), result.attention["cross"], atol=1e-7)


def test_no_attention_model(local_models: dict[str, LocalModel]) -> None:
    plain = local_models["en-de-rnn-none"].translate("A dog runs.", beam_size=1, max_length=5)
    assert plain.kinds == [] and plain.attention == {}
    assert len(plain.to_pandas()) == 0
    assert len(plain.target_logprobs) == len(plain.target_tokens)
    assert plain.target_logprobs.sum() == pytest.approx(plain.logprob, abs=1e-3)
