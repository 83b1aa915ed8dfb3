"""Properties of the explanation methods (attnscope.explain) on tiny random models."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from attnscope.explain import explain
from attnscope.explain.trace import trace
from attnscope.nn.ablation import disabled_heads
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import config_from_dict
from attnscope.nn.factory import build_model
from attnscope.nn.rnn import RNNSeq2Seq
from attnscope.nn.transformer import Transformer

SRC = [5, 6, 7, 8, 9, 3]
TGT = [10, 11, 12, 13, 3]
ALL = ["norm", "rollout", "alti", "value_zeroing"]


def transformer(pre_norm: bool = True, layers: int = 2, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = config_from_dict(
        {
            "architecture": "transformer", "vocab_size": 40, "dropout": 0.0, "d_model": 16, "heads": 2,
            "ff_dim": 32, "encoder_layers": layers, "decoder_layers": layers, "pre_norm": pre_norm,
        }
    )
    model = build_model(config).eval()
    assert isinstance(model, Transformer)
    return model


def rnn(architecture: str = "rnn", score: str = "additive") -> RNNSeq2Seq:
    torch.manual_seed(0)
    config = config_from_dict(
        {"architecture": architecture, "vocab_size": 40, "dropout": 0.0, "score": score, "emb_dim": 12, "hidden_dim": 16}
    )
    model = build_model(config).eval()
    assert isinstance(model, RNNSeq2Seq)
    return model


def forward(model: Seq2Seq) -> tuple[Tensor, Tensor, torch.nn.Module]:
    src = torch.tensor([SRC])
    tgt_in = torch.tensor([[model.config.bos_id, *TGT[:-1]]])
    with torch.no_grad():
        return src, tgt_in, model(src, tgt_in, need_weights=True)  # type: ignore[return-value]


def direct_norms(weights: Tensor, values_in: Tensor, attn: nn.Module) -> Tensor:
    """(H, Q, K) ‖α_ij (x_j W_V^h + b_V^h) W_O^h‖ by a loop over heads and keys, from the weights."""
    heads, dh = attn.heads, attn.head_dim
    wv, bv, wo = attn.v_proj.weight, attn.v_proj.bias, attn.out_proj.weight
    out = torch.zeros_like(weights)
    for h in range(heads):
        rows = slice(h * dh, (h + 1) * dh)
        for j in range(values_in.size(0)):
            f = (values_in[j] @ wv[rows].T + bv[rows]) @ wo[:, rows].T
            out[h, :, j] = weights[h, :, j] * f.norm()
    return out


@pytest.mark.parametrize("pre_norm", [True, False])
def test_trace_is_the_models_forward_pass(pre_norm: bool) -> None:
    model = transformer(pre_norm)
    _, _, out = forward(model)
    traced = trace(model, SRC, TGT)
    torch.testing.assert_close(traced.logits, out.logits, atol=1e-5, rtol=1e-5)
    for blocks, weights in ((traced.encoder, out.encoder_self), (traced.cross, out.cross), (traced.decoder_self, out.decoder_self)):
        torch.testing.assert_close(torch.stack([b.weights[0] for b in blocks]), weights[0], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_transformer_norm_equals_a_direct_computation_from_the_weights(pre_norm: bool) -> None:
    model = transformer(pre_norm)
    src, tgt_in, out = forward(model)
    found = explain(model, SRC, TGT, methods=["norm"]).get("norm").weighted
    assert found is not None
    with torch.no_grad():
        embedded, memory = model._embed(src)[0], model.encode(src).memory[0]
        target = model._embed(tgt_in)[0]
        layer, first = model.decoder_layers[0], model.encoder_layers[0]
        enc_in = first.res_attn.norm(embedded) if pre_norm else embedded
        dec_in = layer.res_self.norm(target) if pre_norm else target
        for kind, index, attn, values in (
            ("encoder_self", 0, first.self_attn, enc_in),
            ("decoder_self", 0, layer.self_attn, dec_in),
            ("cross", 0, layer.cross_attn, memory),
            ("cross", 1, model.decoder_layers[1].cross_attn, memory),
        ):
            weights = getattr(out, kind)[0, index]
            expected = direct_norms(weights, values, attn)
            torch.testing.assert_close(found[kind][index], expected, atol=1e-5, rtol=1e-5)
    assert found["cross"].shape == out.cross[0].shape


@pytest.mark.parametrize("pre_norm", [True, False])
def test_transformer_value_norms_equal_a_direct_computation(pre_norm: bool) -> None:
    model = transformer(pre_norm)
    src, _, out = forward(model)
    found = explain(model, SRC, TGT, methods=["norm"])
    assert found.get("norm") is not None
    with torch.no_grad():
        memory = model.encode(src).memory[0]
        for index, layer in enumerate(model.decoder_layers):
            attn, dh = layer.cross_attn, layer.cross_attn.head_dim
            wv, bv, wo = attn.v_proj.weight, attn.v_proj.bias, attn.out_proj.weight
            for h in range(attn.heads):
                rows = slice(h * dh, (h + 1) * dh)
                expected = torch.stack([((memory[j] @ wv[rows].T + bv[rows]) @ wo[:, rows].T).norm() for j in range(len(SRC))])
                torch.testing.assert_close(found.get("norm").values["cross"][index, h], expected, atol=1e-5, rtol=1e-5)
    for kind, norms in found.get("norm").weighted.items():  # the norm is the weight times the value's size
        weights = getattr(out, kind)[0]
        torch.testing.assert_close(norms, weights * found.get("norm").values[kind][:, :, None, :], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("architecture", ["rnn", "self_attentive_rnn"])
def test_rnn_value_norms_equal_a_direct_computation(architecture: str) -> None:
    model = rnn(architecture)
    src, _, _ = forward(model)
    found = explain(model, SRC, TGT, methods=["norm"]).get("norm").values
    assert found is not None
    h, e = model.config.hidden_dim, model.config.emb_dim
    with torch.no_grad():
        memory = model.encode(src).memory[0]
        w_c = model.pre_output.weight[:, h : 2 * h]
        expected = torch.stack([(w_c @ memory[j]).norm() for j in range(len(SRC))])
        torch.testing.assert_close(found["cross"][0, 0], expected, atol=1e-5, rtol=1e-5)
        if architecture == "self_attentive_rnn":
            a_c = model.encoder.cell.weight[:, e:]
            expected = torch.stack([(a_c @ memory[j]).norm() for j in range(len(SRC))])
            torch.testing.assert_close(found["encoder_self"][0, 0], expected, atol=1e-5, rtol=1e-5)
        else:
            assert set(found) == {"cross"}


@pytest.mark.parametrize("architecture", ["rnn", "self_attentive_rnn"])
def test_rnn_norm_equals_a_direct_computation_through_the_output_layer(architecture: str) -> None:
    model = rnn(architecture)
    src, _, out = forward(model)
    found = explain(model, SRC, TGT, methods=["norm"]).get("norm").weighted
    assert found is not None
    h, e = model.config.hidden_dim, model.config.emb_dim
    with torch.no_grad():
        memory = model.encode(src).memory[0]
        w_c = model.pre_output.weight[:, h : 2 * h]
        expected = torch.stack([out.cross[0, 0, 0, :, j] * (w_c @ memory[j]).norm() for j in range(len(SRC))], dim=-1)
        torch.testing.assert_close(found["cross"][0, 0], expected, atol=1e-5, rtol=1e-5)
        if architecture == "self_attentive_rnn":
            a_c = model.encoder.cell.weight[:, e:]
            rows = out.encoder_self[0, 0, 0]
            expected = torch.stack([rows[:, j] * (a_c @ memory[j]).norm() for j in range(len(SRC))], dim=-1)
            torch.testing.assert_close(found["encoder_self"][0, 0], expected, atol=1e-5, rtol=1e-5)
        else:
            assert set(found) == {"cross"}


def test_rnn_methods_without_a_definition_say_why() -> None:
    found = explain(rnn(), SRC, TGT, methods=ALL)
    assert found.get("norm") is not None and found.get("rollout") is None and found.get("alti") is None
    assert set(found.unavailable) == {"rollout", "alti", "value_zeroing"}
    assert "residual" in found.unavailable["rollout"]
    none = explain(rnn(score="none"), SRC, TGT, methods=["norm"])
    assert none.get("norm") is None and "no attention" in none.unavailable["norm"]


def test_unknown_method_and_empty_target_are_value_errors() -> None:
    with pytest.raises(ValueError, match="unknown explanation method 'lime'"):
        explain(transformer(), SRC, TGT, methods=["lime"])
    with pytest.raises(ValueError, match="no tokens"):
        explain(transformer(), SRC, [], methods=["norm"])


def test_rollout_of_a_single_layer_is_its_residual_mixed_weights() -> None:
    model = transformer(layers=1)
    _, _, out = forward(model)
    found = explain(model, SRC, TGT, methods=["rollout"]).get("rollout")
    assert found is not None
    for kind in ("encoder_self", "decoder_self"):
        weights = getattr(out, kind)[0, 0].mean(0)
        mixed = 0.5 * weights + 0.5 * torch.eye(weights.size(0))
        torch.testing.assert_close(found[kind][0], mixed, atol=1e-6, rtol=1e-5)
    encoder = 0.5 * out.encoder_self[0, 0].mean(0) + 0.5 * torch.eye(len(SRC))
    torch.testing.assert_close(found["cross"][0], out.cross[0, 0].mean(0) @ encoder, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_rollout_rows_sum_to_one(pre_norm: bool) -> None:
    found = explain(transformer(pre_norm, layers=3), SRC, TGT, methods=["rollout"]).get("rollout")
    assert found is not None
    for matrix in found.values():
        torch.testing.assert_close(matrix.sum(-1), torch.ones(matrix.shape[:-1]))


@pytest.mark.parametrize("pre_norm", [True, False])
def test_alti_rows_over_source_and_target_sum_to_one(pre_norm: bool) -> None:
    found = explain(transformer(pre_norm, layers=3), SRC, TGT, methods=["alti"]).get("alti")
    assert found is not None
    assert found.source.shape == (3, len(TGT), len(SRC)) and found.target.shape == (3, len(TGT), len(TGT))
    torch.testing.assert_close(found.source.sum(-1) + found.target.sum(-1), torch.ones(3, len(TGT)))
    assert bool((found.source >= 0).all()) and bool((found.target >= 0).all())
    assert bool((found.target.triu(1) == 0).all())  # no position is made of later ones
    torch.testing.assert_close(found.source_share, found.source[-1].sum(-1))
    assert bool((found.source_share > 0).all())
    assert found.encoder.shape == (3, len(SRC), len(SRC))
    torch.testing.assert_close(found.encoder.sum(-1), torch.ones(3, len(SRC)))


@pytest.mark.parametrize("pre_norm", [True, False])
def test_a_decoder_that_ignores_the_source_has_source_share_zero(pre_norm: bool) -> None:
    model = transformer(pre_norm)
    with torch.no_grad():
        for layer in model.decoder_layers:
            layer.cross_attn.out_proj.weight.zero_()
            layer.cross_attn.out_proj.bias.zero_()
    found = explain(model, SRC, TGT, methods=["alti"]).get("alti")
    assert found is not None
    assert found.source_share.abs().max() == 0.0
    torch.testing.assert_close(found.target.sum(-1), torch.ones(2, len(TGT)))


def test_cross_heads_switched_off_give_source_share_zero() -> None:
    model = transformer()
    heads = [("cross", layer, head) for layer in range(2) for head in range(2)]
    with disabled_heads(model, heads):
        found = explain(model, SRC, TGT, methods=["alti", "value_zeroing"])
    assert found.get("alti") is not None and found.get("alti").source_share.abs().max() == 0.0
    assert found.get("value_zeroing") is not None and found.get("value_zeroing")["cross"].abs().max() == 0.0


@pytest.mark.parametrize("pre_norm", [True, False])
def test_value_zeroing_gives_a_token_the_layer_ignores_zero(pre_norm: bool) -> None:
    found = explain(transformer(pre_norm), SRC, TGT, methods=["value_zeroing"]).get("value_zeroing")
    assert found is not None
    own = found["decoder_self"]
    assert bool((own.triu(1) == 0).all())  # a decoder position ignores the tokens after it
    below = torch.ones(len(TGT), len(TGT), dtype=torch.bool).tril()
    assert bool((own[:, below] > 0).all())  # and depends on each earlier one
    for kind, matrix in found.items():
        torch.testing.assert_close(matrix.sum(-1), torch.ones(matrix.shape[:-1]), msg=kind)


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_contrastive_attribution_is_complete_and_zero_against_the_chosen_token(architecture: str) -> None:
    from attnscope.explain.contrastive import contrastive

    model = transformer() if architecture == "transformer" else rnn()
    found = contrastive(model, SRC, TGT, position=2, foil=20, steps=64)
    assert found.input_x_gradient.shape == (len(SRC),) == found.integrated_gradients.shape
    assert abs(found.completeness_gap) < 0.05 * max(1.0, abs(found.f - found.f_baseline))
    src, tgt_in, out = forward(model)
    logits = out.logits[0, 2]
    assert abs(found.f - float(logits[TGT[2]] - logits[20])) < 1e-4  # the logit difference at x
    same = contrastive(model, SRC, TGT, position=2, foil=TGT[2], steps=4)  # no contrast: nothing to attribute
    assert same.f == 0.0 and float(same.integrated_gradients.abs().max()) == 0.0
    with pytest.raises(ValueError, match="outside"):
        contrastive(model, SRC, TGT, position=len(TGT), foil=20)


def test_an_int8_model_is_explained_through_its_dequantised_weights() -> None:
    from attnscope.nn.quantize import quantize

    plain = explain(transformer(), SRC, TGT, methods=ALL)
    model = quantize(transformer(), "int8")
    found = explain(model, SRC, TGT, methods=ALL)
    assert set(found.results) == set(plain.results) == set(ALL)
    for kind, matrix in found.get("norm").weighted.items():  # int8 products: close to the float model, not equal
        torch.testing.assert_close(matrix, plain.get("norm").weighted[kind], atol=0.05, rtol=0.1)
    alti = found.get("alti")
    torch.testing.assert_close(alti.source.sum(-1) + alti.target.sum(-1), torch.ones(2, len(TGT)))
