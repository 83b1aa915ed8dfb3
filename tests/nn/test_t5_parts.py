"""T5's pieces in the own Transformer (attnscope/nn/t5_parts.py and its config fields): the relative
position bias decodes step by step like the full pass, a padded batch encodes like each sentence
alone, the recorded scores include the bias, and the shipped configs do not change."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import TransformerConfig, config_to_dict
from attnscope.nn.recording import recording
from attnscope.nn.t5_parts import RMSNorm, relative_buckets
from attnscope.nn.transformer import Transformer

ModelFactory = Callable[..., Seq2Seq]
T5 = dict(
    positions="relative", relative_buckets=8, relative_max_distance=12, norm="rms", norm_eps=1e-6,
    linear_bias=False, scale_attention=False, scale_embedding=False, output_bias=True, head_dim=12,
    encoder_layers=3, decoder_layers=2, heads=4,
)  # fmt: skip


@pytest.fixture(params=[False, True], ids=["relu", "gated"])
def t5(make_model: ModelFactory, request: pytest.FixtureRequest) -> Transformer:
    gated = bool(request.param)
    model = make_model("transformer", **T5, gated_ff=gated, activation="gelu_new" if gated else "relu", scale_output=not gated)
    assert isinstance(model, Transformer) and not model.config.standard_layout
    with torch.no_grad():  # the bias away from 0, so that a wrong offset shows
        for side in ("encoder", "decoder"):
            getattr(model, f"{side}_relative").embed.weight.normal_(0.0, 1.0)
    return model


def test_buckets_exact_near_logarithmic_far() -> None:
    distance = torch.arange(-40, 41)[None, :]  # key - query
    both = relative_buckets(distance, bidirectional=True, buckets=8, max_distance=12)[0]
    causal = relative_buckets(distance, bidirectional=False, buckets=8, max_distance=12)[0]
    assert both[40].item() == 0 and both[41].item() == 5 and both[39].item() == 1  # 0, +1 (4 + 1), -1
    assert both.max().item() == 7 and both.min().item() == 0
    assert causal[40:].eq(0).all()  # future keys share distance 0's bucket (the mask hides them)
    assert causal[:41].flip(0).tolist() == sorted(causal[:41].flip(0).tolist()) and causal.max().item() == 7


def test_rms_norm_is_t5s() -> None:
    norm = RMSNorm(6, eps=1e-6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 6)
    expected = norm.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(norm(x), expected)


def test_incremental_equals_forward(t5: Transformer, src: Tensor, tgt_in: Tensor) -> None:
    """Step t's bias is row t of the full pass's (keys 0..t): log-probabilities and every row of
    attention equal the teacher-forced pass; the fused (no weights) path equals the explicit one."""
    full = t5(src, tgt_in, need_weights=True)
    fused = t5(src, tgt_in, need_weights=False)
    torch.testing.assert_close(fused.logits, full.logits, atol=1e-5, rtol=1e-5)
    assert full.cross is not None and full.decoder_self is not None and full.encoder_self is not None
    assert full.encoder_self.shape == (3, 3, 4, 7, 7)
    enc = t5.encode(src, need_weights=True)
    state = t5.init_state(enc)
    expected = torch.log_softmax(full.logits, -1)
    for t in range(tgt_in.size(1)):
        step, state = t5.step(tgt_in[:, t], state, enc, need_weights=True)
        torch.testing.assert_close(step.log_probs, expected[:, t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(step.decoder_self, full.decoder_self[:, :, :, t, : t + 1], atol=1e-6, rtol=1e-5)


def test_padded_batch_encodes_like_each_sentence_alone(t5: Transformer, src: Tensor) -> None:
    """The packed encoder (a padded batch at inference) adds the same bias as the plain one."""
    with torch.no_grad():
        batch = t5.encode(src, need_weights=True)
        for b, n in enumerate((7, 4, 6)):
            alone = t5.encode(src[b : b + 1, :n], need_weights=True)
            torch.testing.assert_close(batch.memory[b, :n], alone.memory[0], atol=1e-5, rtol=1e-5)
            assert batch.encoder_self is not None and alone.encoder_self is not None
            torch.testing.assert_close(batch.encoder_self[b, :, :, :n, :n], alone.encoder_self[0], atol=1e-6, rtol=1e-5)


def test_recorded_scores_include_the_bias(t5: Transformer, src: Tensor, tgt_in: Tensor) -> None:
    """return_scores' pre-softmax scores are what the softmax read: unscaled q.k plus the bias."""
    with recording() as recorder:
        out = t5(src[:1], tgt_in[:1], need_weights=True)
    record = recorder.of(t5.encoder_layers[0].self_attn)[0]
    assert out.encoder_self is not None
    torch.testing.assert_close(record.scores.softmax(-1), out.encoder_self[:, 0])


def test_shipped_config_writes_no_t5_field() -> None:
    written = config_to_dict(TransformerConfig(vocab_size=100))
    for name in ("head_dim", "norm", "norm_eps", "linear_bias", "scale_attention", "gated_ff", "scale_output", "relative_buckets"):
        assert name not in written
    assert TransformerConfig(vocab_size=100).standard_layout
    assert not TransformerConfig(vocab_size=100, norm="rms").standard_layout
    with pytest.raises(ValueError, match="unknown norm"):
        TransformerConfig(vocab_size=100, norm="batch")


def test_new_gelu_is_the_tanh_approximation() -> None:
    from attnscope.nn.t5_parts import NewGELU

    x = torch.linspace(-6, 6, 101)
    torch.testing.assert_close(NewGELU()(x), torch.nn.GELU(approximate="tanh")(x))
