"""The decoding fast paths: fused, transposed and packed fp16 weights (attnscope.nn.inference) and cross
keys/values shared by a sentence's beams give what the training path gives, and follow weight
updates."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from attnscope.nn import inference
from attnscope.nn.attention import MultiHeadAttention
from attnscope.nn.base import Seq2Seq
from attnscope.nn.transformer import Transformer

ModelFactory = Callable[..., Seq2Seq]
SourceFactory = Callable[..., Tensor]


def _transformer(make_model: ModelFactory, fp16_exact: bool = False) -> Transformer:
    """A tiny Transformer; with ``fp16_exact`` every parameter is a half-precision number, as a
    model loaded from fp16 safetensors has (its products then run packed)."""
    model = make_model("transformer", heads=4)
    assert isinstance(model, Transformer)
    with torch.no_grad():
        for p in model.parameters():  # non-zero biases, so a q/k/v mix-up in the fused weights shows
            if p.dim() == 1:
                nn.init.normal_(p, std=0.3)
            if fp16_exact:
                p.copy_(p.half().float())
    return model


class _PackedCalls:
    """Counts calls of the packed fp16 kernel (the real one runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = torch.fbgemm_linear_fp16_weight

        def counted(*args: Tensor) -> Tensor:
            self.count += 1
            return real(*args)

        monkeypatch.setattr(torch, "fbgemm_linear_fp16_weight", counted)


@pytest.mark.parametrize("fp16_exact", [False, True])
def test_decoding_path_equals_the_training_path_with_shared_beams(
    make_model: ModelFactory, make_source: SourceFactory, monkeypatch: pytest.MonkeyPatch, fp16_exact: bool
) -> None:
    """Teacher-forced logits and attention with gradients on (separate projections, F.linear)
    equal the incremental decoding path (fused QKV, transposed or, for fp16 weights, packed
    products), with three beam rows per sentence sharing its cross keys/values."""
    model = _transformer(make_model, fp16_exact)
    packed = _PackedCalls(monkeypatch)
    src = make_source((7, 4, 6))
    tgt_in = torch.tensor([[2, 9, 8, 7, 6], [2, 11, 12, 13, 14], [2, 15, 16, 17, 18]])
    full = model(src, tgt_in, need_weights=True)
    assert full.cross is not None and full.decoder_self is not None
    beams = 3
    rows = torch.arange(3).repeat_interleave(beams)
    expected = torch.log_softmax(full.logits, -1).detach()
    with torch.inference_mode():
        enc = model.encode(src, need_weights=True)
        enc_rows, state = model.init_beams(enc, beams)
        assert enc_rows.mask.size(0) == 3 and state.group == beams
        assert all(k.size(0) == 3 for k, _ in state.cross_kv)  # one copy per sentence
        for t in range(tgt_in.size(1)):
            step, state = model.step(tgt_in[rows, t], state, enc_rows, need_weights=True)
            assert step.cross is not None and step.decoder_self is not None
            torch.testing.assert_close(step.log_probs, expected[rows, t], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(step.cross, full.cross[rows, :, :, t].detach(), atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(
                step.decoder_self, full.decoder_self[rows, :, :, t, : t + 1].detach(), atol=1e-6, rtol=1e-5
            )
    assert (packed.count > 0) == fp16_exact  # encoder, cross keys/values, every step, output


def test_dropping_a_sentence_selects_its_shared_keys(
    make_model: ModelFactory, make_source: SourceFactory
) -> None:
    model = _transformer(make_model)
    src = make_source((7, 4, 6))
    with torch.inference_mode():
        enc = model.encode(src)
        _, state = model.init_beams(enc, 2)
        _, state = model.step(torch.full((6,), 2), state, enc)
        swapped = state.reorder(torch.tensor([1, 0, 5, 5, 4, 4]))  # parents within each sentence
        assert swapped.cross_kv[0][0] is state.cross_kv[0][0]  # nothing copied
        dropped = state.reorder(torch.tensor([5, 4]))  # sentences 0 and 1 have finished
        assert torch.equal(dropped.cross_kv[0][0], state.cross_kv[0][0][2:3])
        assert torch.equal(dropped.cross_mask, state.cross_mask[2:3])
        assert state.self_kv is not None and dropped.self_kv is not None
        assert torch.equal(dropped.self_kv[0][0], state.self_kv[0][0][[5, 4]])


def test_grouped_keys_equal_repeated_keys() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    q = torch.randn(6, 4, 2, 4)  # 3 sentences x 2 rows, 2 queries each
    k, v = torch.randn(3, 4, 5, 4), torch.randn(3, 4, 5, 4)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 2, 4])[:, None])[:, None, None, :]
    rows = torch.arange(3).repeat_interleave(2)
    for need_weights in (True, False):
        shared, w_shared = mha.attend(q, k, v, mask, need_weights)
        copied, w_copied = mha.attend(q, k[rows], v[rows], mask[rows], need_weights)
        torch.testing.assert_close(shared, copied)
        if need_weights:
            assert w_shared is not None and w_copied is not None
            torch.testing.assert_close(w_shared, w_copied)


@pytest.mark.parametrize("fp16_exact", [False, True])
def test_cached_decoding_weights_follow_parameter_updates(
    make_model: ModelFactory, make_source: SourceFactory, fp16_exact: bool
) -> None:
    """An optimizer step changes the parameters in place: the next decoding step must use the
    new weights, not the fused/transposed/packed copies made before (fp16 weights stop being
    fp16 after the step, so their products go from packed to transposed)."""
    model = _transformer(make_model, fp16_exact)
    src, tokens = make_source((5, 3)), torch.tensor([2, 2])

    def decode_step() -> Tensor:
        with torch.no_grad():
            enc = model.encode(src)
            return model.step(tokens, model.init_state(enc), enc)[0].log_probs

    before = decode_step()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = model(src, tokens[:, None]).logits.logsumexp(-1).sum()
    loss.backward()
    optimizer.step()
    after = decode_step()
    reference = torch.log_softmax(model(src, tokens[:, None]).logits[:, 0], -1).detach()
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_the_packed_encoder_equals_the_padded_one_at_every_real_position(
    make_model: ModelFactory, make_source: SourceFactory, pre_norm: bool
) -> None:
    """At inference a padded batch is encoded with the products on its real tokens only (and the
    cross keys/values projected likewise): the memory, the encoder self-attention of every real
    query and the cross keys/values of every real position are those of the training path, and
    the padding's memory and keys/values are zero."""
    model = _transformer(make_model)
    for layer in model.encoder_layers:
        for res in (layer.res_attn, layer.res_ff):
            res.pre_norm = pre_norm
    src = make_source((7, 2, 5, 7))
    mask = src.ne(0)
    with torch.enable_grad():
        full = model.encode(src, need_weights=True)
        state = model.init_state(full)
    with torch.inference_mode():
        packed = model.encode(src, need_weights=True)
        packed_state = model.init_state(packed)
    assert full.encoder_self is not None and packed.encoder_self is not None
    torch.testing.assert_close(packed.memory[mask], full.memory[mask].detach(), atol=1e-5, rtol=1e-5)
    assert packed.memory[~mask].abs().sum() == 0
    for b, n in enumerate(mask.sum(1).tolist()):
        torch.testing.assert_close(
            packed.encoder_self[b, :, :, :n], full.encoder_self[b, :, :, :n].detach(), atol=1e-6, rtol=1e-5
        )
    for (k, v), (pk, pv) in zip(state.cross_kv, packed_state.cross_kv, strict=True):
        real = mask[:, None, :, None].expand_as(k)
        torch.testing.assert_close(pk[real], k[real].detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(pv[real], v[real].detach(), atol=1e-5, rtol=1e-5)
        assert pk[~real].abs().sum() == 0 and pv[~real].abs().sum() == 0


def test_packed_fp16_only_where_it_is_the_same_product() -> None:
    """A weight of fp16 values gets a packed copy whose products equal the fp32 ones (the
    activations are not rounded to fp16); a weight that fp16 would round, one in another dtype
    and one that overflows fp16 do not."""
    torch.manual_seed(0)
    weight = (torch.randn(96, 40) * 0.05).half().float()
    bias = (torch.randn(96) * 0.1).half().float()
    packed = inference.packed_fp16(weight, bias)
    assert packed is not None
    x = torch.randn(7, 40)
    want = (x.double() @ weight.double().t() + bias.double()).float()
    got = torch.fbgemm_linear_fp16_weight(x, packed[0], packed[1])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    rounded_x = (x.half().double() @ weight.double().t() + bias.double()).float()
    assert (rounded_x - want).abs().max() > 100 * (got - want).abs().max()  # fp32 activations
    assert inference.packed_fp16(weight + 1e-4, bias) is None  # not fp16 values
    assert inference.packed_fp16(weight.double(), bias) is None
    assert inference.packed_fp16(weight * 1e5, bias) is None  # beyond fp16's range


@pytest.mark.parametrize("threads", [1, 2])
def test_products_packed_or_dense_agree_at_every_row_count(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """One product (fused, a layer without bias among them; and a bias-free matrix) gives the
    fp32 result at 1 to 40 rows. With one torch thread every product runs packed; with more,
    products of more than PACKED_ROWS rows go to the multi-threaded dense kernel."""
    torch.manual_seed(0)
    owner = nn.Module()
    layers = (nn.Linear(32, 48), nn.Linear(32, 16, bias=False))
    with torch.no_grad():
        for layer in layers:
            for p in layer.parameters():
                p.copy_(p.half().float())
    packed = _PackedCalls(monkeypatch)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            fused = inference.product(owner, "fused", layers)
            matrix = inference.matrix_product(owner, "matrix", layers[0].weight)
            for rows in (1, 5, inference.PACKED_ROWS, 40):
                x = torch.randn(rows, 32)
                calls = packed.count
                want = torch.cat([layer(x) for layer in layers], dim=-1)
                torch.testing.assert_close(fused(x), want, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(matrix(x), x @ layers[0].weight.t(), atol=1e-5, rtol=1e-5)
                ran_packed = threads == 1 or rows <= inference.PACKED_ROWS
                assert packed.count - calls == (2 if ran_packed else 0)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("fp16_exact", [False, True])
def test_a_model_decoded_with_is_freed_with_its_cached_products(
    make_model: ModelFactory, make_source: SourceFactory, fp16_exact: bool
) -> None:
    """Once nothing else holds a model that decoded (every float linear layer's product cached,
    packed or dense), the model, each of its layers and their cache entries are freed: a cached
    value that held its own module would keep every unloaded model of a bounded server alive
    (issue 45.3)."""
    import gc
    import weakref

    model = _transformer(make_model, fp16_exact)
    src = make_source((7, 4, 6))
    with torch.inference_mode():
        enc = model.encode(src, need_weights=False)
        enc_rows, state = model.init_beams(enc, 1)
        model.step(torch.full((3,), 2), state, enc_rows, need_weights=False)
        for module in model.modules():
            if type(module) is nn.Linear:
                inference.linear(module, torch.randn(2, module.in_features))  # a layer as its own owner
    cached = [m for m in model.modules() if m in inference._cache]
    assert any(type(m) is nn.Linear for m in cached) and len(cached) > 3
    refs = [weakref.ref(m) for m in model.modules()]
    del model, enc, enc_rows, state, cached, module
    gc.collect()
    assert [r for r in refs if r() is not None] == []
