"""An explanation method registered from outside the package, the way docs/extending.md says to
add one: this one module and nothing else. ``head_mean`` is each layer's attention averaged over
its heads, [layer][query][key] per kind, read from the Transformer's trace; the tests check it
against the answer's own attention averaged by hand, and that serving, admission and the pages
take it with no edit of theirs. Importing the module registers it (``unregister("head_mean")``
removes it)."""

from __future__ import annotations

import torch
from torch import Tensor

from attnscope.explain.registry import (
    AnswerField,
    Draw,
    ExplainMethod,
    Sentence,
    kinds_json,
    per_kind,
    register,
)

PRICE = 1_000  # token-layer passes per query-key pair: dear on purpose, so admission has to refuse it


def head_mean(sentence: Sentence) -> dict[str, Tensor]:
    """kind -> (L, Q, K) the heads' mean weights of every layer."""
    traced = sentence.trace
    blocks = {"cross": traced.cross, "encoder_self": traced.encoder, "decoder_self": traced.decoder_self}
    return {kind: torch.stack([b.weights[0].float().mean(0) for b in layers]) for kind, layers in blocks.items()}


METHOD = register(
    ExplainMethod(
        name="head_mean",
        label="head mean",
        long_label="mean of the heads",
        paper="(a test's method) no paper",
        url="https://example.org/head-mean",
        help="Each layer's attention weights averaged over its heads.",
        runs={"transformer": head_mean},
        reasons={"recurrent": "an RNN has one head: its mean is its weights"},
        fields=(AnswerField("head_mean", "[layer][query][key] the heads' mean weights.", per_kind(3)),),
        encode=lambda found, decimals: {"head_mean": kinds_json(found, decimals)},
        draw=Draw(field="head_mean"),
        cost=lambda size: PRICE * size.s * size.t,
        floats=lambda size: size.per_layer(),
    )
)
