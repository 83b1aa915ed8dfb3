"""Properties every model shares (the RNN with each score, the RNN without attention, the
self-attentive RNN, the Transformer): normalised attention with zero weight on padding, one
attention format, incremental decoding equal to the teacher-forced pass, a decoder state that
reorders, padding that changes nothing, and attention returned rather than stored."""

from __future__ import annotations

import torch
from torch import Tensor

from attnscope.nn.base import Seq2Seq, reorder_encoder


def assert_rows_normalised(weights: Tensor, key_mask: Tensor) -> None:
    """weights: (B, L, H, Q, K); key_mask: (B, K) True for keys that may get weight."""
    ones = torch.ones(weights.shape[:-1])
    torch.testing.assert_close(weights.sum(-1), ones, atol=1e-5, rtol=0)
    padded = ~key_mask[:, None, None, None, :].expand_as(weights)
    assert (weights[padded] == 0).all(), "a padded key got weight"


def test_forward_attention_rows_sum_to_one_and_skip_padding(
    model: Seq2Seq, src: Tensor, tgt_in: Tensor
) -> None:
    c = model.config
    (batch, s), t = src.shape, tgt_in.size(1)
    out = model(src, tgt_in, need_weights=True)
    assert out.logits.shape == (batch, t, c.vocab_size)
    returned = {k for k in ("cross", "encoder_self", "decoder_self") if getattr(out, k) is not None}
    assert returned == set(c.attention_kinds)
    mask = src.ne(c.pad_id)
    if out.cross is not None:
        assert out.cross.shape == (batch, c.layers, c.num_heads, t, s)
        assert_rows_normalised(out.cross, mask)
    if out.encoder_self is not None:
        enc_layers = c.encoder_layers if c.architecture == "transformer" else 1
        assert out.encoder_self.shape == (batch, enc_layers, c.num_heads, s, s)
        assert_rows_normalised(out.encoder_self, mask)
    if out.decoder_self is not None:
        assert out.decoder_self.shape == (batch, c.layers, c.num_heads, t, t)
        assert_rows_normalised(out.decoder_self, torch.ones(batch, t, dtype=torch.bool))
        assert (out.decoder_self.triu(1) == 0).all(), "a target position attended to the future"


def test_no_weights_asked_gives_same_logits_and_no_attention(
    model: Seq2Seq, src: Tensor, tgt_in: Tensor
) -> None:
    with_weights = model(src, tgt_in, need_weights=True)
    fused = model(src, tgt_in, need_weights=False)  # the Transformer takes the SDPA kernel here
    assert fused.cross is None and fused.encoder_self is None and fused.decoder_self is None
    torch.testing.assert_close(fused.logits, with_weights.logits, atol=1e-5, rtol=1e-5)


def test_step_by_step_equals_the_full_forward_pass(
    model: Seq2Seq, src: Tensor, tgt_in: Tensor
) -> None:
    full = model(src, tgt_in, need_weights=True)
    expected = torch.log_softmax(full.logits, dim=-1)
    enc = model.encode(src, need_weights=True)
    state, fused_state = model.init_state(enc), model.init_state(enc)
    for t in range(tgt_in.size(1)):
        step, state = model.step(tgt_in[:, t], state, enc, need_weights=True)
        fused, fused_state = model.step(tgt_in[:, t], fused_state, enc, need_weights=False)
        torch.testing.assert_close(step.log_probs, expected[:, t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(fused.log_probs, expected[:, t], atol=1e-5, rtol=1e-5)
        assert fused.cross is None and fused.decoder_self is None
        if full.cross is None:
            assert step.cross is None
        else:
            assert step.cross is not None
            torch.testing.assert_close(step.cross, full.cross[:, :, :, t], atol=1e-6, rtol=1e-5)
        if full.decoder_self is None:
            assert step.decoder_self is None
        else:
            assert step.decoder_self is not None and step.decoder_self.size(-1) == t + 1
            row = full.decoder_self[:, :, :, t, : t + 1]
            torch.testing.assert_close(step.decoder_self, row, atol=1e-6, rtol=1e-5)


def test_reorder_then_step_equals_stepping_the_reordered_inputs(
    model: Seq2Seq, src: Tensor, tgt_in: Tensor
) -> None:
    """Reorder mid-sentence (dropping, duplicating and swapping rows, as a beam does) and carry on;
    the result must equal decoding the reordered batch from the start."""
    index = torch.tensor([2, 0, 0, 1])
    enc = model.encode(src)
    state = model.init_state(enc)
    for t in range(2):
        _, state = model.step(tgt_in[:, t], state, enc)
    state, enc = state.reorder(index), reorder_encoder(enc, index)

    ref_src, ref_tgt = src[index], tgt_in[index]
    ref_enc = model.encode(ref_src)
    ref_state = model.init_state(ref_enc)
    for t in range(2):
        _, ref_state = model.step(ref_tgt[:, t], ref_state, ref_enc)
    for t in range(2, tgt_in.size(1)):
        step, state = model.step(ref_tgt[:, t], state, enc, need_weights=True)
        ref, ref_state = model.step(ref_tgt[:, t], ref_state, ref_enc, need_weights=True)
        torch.testing.assert_close(step.log_probs, ref.log_probs, atol=1e-5, rtol=1e-5)
        for name in ("cross", "decoder_self"):
            got, want = getattr(step, name), getattr(ref, name)
            assert (got is None) == (want is None)
            if got is not None:
                torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_padding_changes_nothing(model: Seq2Seq, src: Tensor, tgt_in: Tensor) -> None:
    """Each sentence gives the same logits and attention alone as inside the padded batch."""
    batch = model(src, tgt_in, need_weights=True)
    for b, n in enumerate(src.ne(model.config.pad_id).sum(1).tolist()):
        alone = model(src[b : b + 1, :n], tgt_in[b : b + 1], need_weights=True)
        torch.testing.assert_close(batch.logits[b], alone.logits[0], atol=1e-5, rtol=1e-5)
        if alone.cross is not None:
            assert batch.cross is not None
            torch.testing.assert_close(
                batch.cross[b, ..., :n], alone.cross[0], atol=1e-6, rtol=1e-5
            )
        if alone.encoder_self is not None:
            assert batch.encoder_self is not None
            got = batch.encoder_self[b, :, :, :n, :n]
            torch.testing.assert_close(got, alone.encoder_self[0], atol=1e-6, rtol=1e-5)
        if alone.decoder_self is not None:
            assert batch.decoder_self is not None
            torch.testing.assert_close(
                batch.decoder_self[b], alone.decoder_self[0], atol=1e-6, rtol=1e-5
            )


def test_attention_is_returned_never_stored(model: Seq2Seq, src: Tensor, tgt_in: Tensor) -> None:
    def attributes() -> dict[str, set[str]]:
        return {name: set(vars(m)) for name, m in model.named_modules()}

    before = attributes()
    model(src, tgt_in, need_weights=True)
    enc = model.encode(src, need_weights=True)
    model.step(tgt_in[:, 0], model.init_state(enc), enc, need_weights=True)
    assert attributes() == before
    for name, module in model.named_modules():
        stray = [k for k, v in vars(module).items() if isinstance(v, Tensor)]
        assert not stray, f"{name or 'model'} keeps tensors {stray} outside its parameters/buffers"
