"""The self-attentive RNN encoder: each state attends over its own past, so ``encoder_self`` is a
lower-triangular matrix of normalised rows."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from attnscope.nn.base import Seq2Seq
from attnscope.nn.rnn import RNNSeq2Seq
from attnscope.nn.self_attentive import SelfAttentiveEncoder

ModelFactory = Callable[..., Seq2Seq]


def test_encoder_self_is_lower_triangular_with_normalised_rows(
    make_model: ModelFactory, src: Tensor
) -> None:
    model = make_model("self_attentive_rnn")
    enc = model.encode(src, need_weights=True)
    weights = enc.encoder_self
    assert weights is not None and weights.shape == (3, 1, 1, 7, 7)
    assert (weights.triu(1) == 0).all(), "a state attended to a later one"
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 1, 1, 7), atol=1e-5, rtol=0)
    assert (weights[..., 0, 0] == 1).all()  # the first state can only see itself
    lengths = src.ne(0).sum(1)
    for b, n in enumerate(lengths.tolist()):
        real = weights[b, 0, 0, :n, :n]
        past = torch.ones(n, n, dtype=torch.bool).tril()
        assert (real[past] > 0).all()  # every real past state gets some weight
        assert (weights[b, ..., n:] == 0).all()  # padding gets none


def test_encoder_states_follow_the_recurrence(make_model: ModelFactory, src: Tensor) -> None:
    """h_t = tanh(A [x_t; c_{t-1}] + b) with c_{t-1} = Σ_i α_{t-1,i} h_i (c_0 = 0)."""
    model = make_model("self_attentive_rnn")
    assert isinstance(model, RNNSeq2Seq) and isinstance(model.encoder, SelfAttentiveEncoder)
    enc = model.encode(src, need_weights=True)
    emb = model.embed(src)
    assert enc.encoder_self is not None
    alpha = enc.encoder_self[:, 0, 0]  # (B, S, S)
    context = torch.zeros(3, model.config.hidden_dim)
    for t in range(src.size(1)):
        h_t = torch.tanh(model.encoder.cell(torch.cat([emb[:, t], context], -1)))
        torch.testing.assert_close(enc.memory[:, t], h_t, atol=1e-6, rtol=1e-5)
        context = torch.einsum("bs,bsh->bh", alpha[:, t], enc.memory)
