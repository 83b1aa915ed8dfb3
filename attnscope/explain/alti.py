"""ALTI+ (Ferrando, Gállego, Alastruey, Escolano & Costa-jussà 2022, "Towards Opening the Black
Box of Neural Machine Translation: Source and Target Contributions to the Model's Output"),
built on ALTI (Ferrando, Gállego & Costa-jussà 2022, "Measuring the Mixing of Contextual
Information in the Transformer").

An attention sublayer's output at position i, residual included, is a sum of one vector per
input token plus a bias: y_i = Σ_j T_i(x_j) + b. Pre-norm: T_i(x_j) = Σ_h α^h_ij f_h(x_j) (+ x_i
for j = i). Post-norm: the same vectors through the layer norm's linear part with position i's
statistics, γ ⊙ (v - mean(v)) / σ_i. The contribution of j is how close T_i(x_j) comes to the
sublayer's real output y_i = Σ_j T_i(x_j) + b (biases included: the output projection's, and
post-norm the layer norm's β, as the authors' implementation measures it; issue 45.7 found the
plain sum used before, up to 0.08 off) in L1 distance, c_ij = max(0, ‖y_i‖₁ - ‖y_i - T_i(x_j)‖₁),
normalised over j. Layers compose by matrix products (the feed-forward sublayers mix nothing).

For the encoder-decoder (the "+"): the encoder's products E (S × S) say what each encoder
output is made of. A decoder position starts as itself, R = [0 | I] over the source and the
decoder's input tokens; a self-attention sublayer gives R ← C_self R; a cross-attention sublayer
splits position i between its residual (the stream so far) and each encoder output j,
R ← c_res · R + C_cross [E | 0]. The answer, after every decoder layer: ``source`` (L, T, S) and
``target`` (L, T, T) (the keys of decoder_self: <s> and the target prefix), each row over both
summing to 1, and ``source_share`` (T,) the last layer's source mass per target position;
``encoder`` (L_e, S, S) is E after each encoder layer.

Decoder-only models (:func:`decoder_only_alti`; the Llama, Qwen, Gemma and GPT-2 layouts of
:mod:`attnscope.nn.decoder_only`): ALTI through the one causal stack. Every layer is pre-norm: its attention sublayer reads ``h_j = norm(x_j)``, a function of x_j
alone (RMSNorm or LayerNorm: per token), so, as for a pre-norm Transformer, the sublayer's output
at position i, residual included, is a sum of one vector per input token plus a bias:

    y_i = x_i + P_i(Σ_j Σ_h α^h_ij f_h(x_j) + b_O),   f_h(x_j) = (W_V^{g(h)} h_j + b_V^{g(h)}) W_O^h

with g(h) the key/value head query head h shares (grouped-query attention; a value bias belongs
to every token's vector, since Σ_j α_ij = 1), W_O^h h's columns of the output projection and b_O
its bias. P_i is the identity, except for Gemma's norm *after* the attention sublayer,
``v ⊙ (o + w) / rms(v)``: linear once its root mean square is that of position i's whole sum,
the way ALTI takes a post-norm LayerNorm's σ_i (no centring: RMSNorm has none). So

    T_i(x_j) = P_i(Σ_h α^h_ij f_h(x_j)) (+ x_i for j = i),   y_i = Σ_j T_i(x_j) + P_i(b_O),

and ALTI's contribution of j is c_ij = max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁), normalised over j
(:func:`contributions`, with y_i the real output, biases included).
Soft-capping and sliding windows change only α; the feed-forward sublayers (gated or not) act
on each position alone and mix nothing, so, as ALTI does, layers compose by matrix products,
R_l = C_l R_{l−1} over every position the model ran (prompt + output but its last token).

The answer has the encoder-decoders' ALTI+ parts (:class:`Alti`), cut from R
after each layer like the views: ``source`` (L, T, S) the output rows over the source's prompt
tokens (*not* renormalised: the rest of each row is the instruction, the first token and the
output so far), ``target`` (L, T, T) the output rows over the last prompt token + output (the
``decoder_self`` keys), ``source_share`` (T,) the last layer's source total, ``encoder`` (L, S, S)
the source rows over the source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from attnscope.explain.registry import (
    AnswerField,
    Draw,
    ExplainMethod,
    Sentence,
    Size,
    nested,
    register,
    rounded,
)
from attnscope.explain.trace import Block, Trace, bias_of, transformed
from attnscope.nn.decoder_only import DecoderOnlyLM, Layer, run_catching_inputs


@dataclass(frozen=True)
class Alti:
    """source: (L, T, S); target: (L, T, T); source_share: (T,); encoder: (L_e, S, S) ALTI
    through the encoder's layers (what each encoder position is made of, after each layer)."""

    source: Tensor
    target: Tensor
    source_share: Tensor
    encoder: Tensor


def _through_norm(block: Block, vectors: Tensor, total: Tensor) -> Tensor:
    """vectors (Q, N, D) summing (with the output bias) to ``total`` (Q, D), the sum a post-norm
    layer normalises: their images under that layer norm's linear part."""
    norm = block.res.norm
    sigma = (total.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # (Q, 1)
    centred = vectors - vectors.mean(-1, keepdim=True)
    gamma = norm.weight.float() if norm.weight is not None else 1.0
    return centred / sigma[:, None] * gamma


def token_vectors(block: Block, *, own: bool) -> Tensor:
    """T_i(x_j) of one sublayer (first copy of the batch): (Q, K, D) for a self-attention
    (``own``: the residual x_i added at j = i), (Q, 1 + K, D) for a cross-attention (the
    residual first, then each encoder output)."""
    f = transformed(block)[0]  # (H, K, D)
    moved = torch.einsum("hqk,hkd->qkd", block.weights[0].float(), f)  # (Q, K, D)
    residual = block.residual[0].float()  # (Q, D)
    if own:
        index = torch.arange(residual.size(0), device=residual.device)
        vectors = moved.clone()
        vectors[index, index] += residual
    else:
        vectors = torch.cat([residual[:, None], moved], dim=1)
    if block.res.pre_norm:
        return vectors
    bias = bias_of(block.attn.out_proj)
    total = vectors.sum(1) + (0.0 if bias is None else bias)
    return _through_norm(block, vectors, total)


def contributions(vectors: Tensor, output: Tensor | None = None) -> Tensor:
    """vectors: (Q, N, D) -> (Q, N) ALTI contributions, each row summing to 1 (0 where nothing
    contributes). ``output`` (Q, D): the sublayer's real output y_i, biases included (the output
    projection's b_O; post-norm: the layer norm's β and its image of b_O), as the authors define
    the distances (issue 45.7); None: the plain sum of the vectors (the biases left out)."""
    total = vectors.sum(1, keepdim=True) if output is None else output.float()[:, None]  # (Q, 1, D)
    size = total.abs().sum(-1)  # (Q, 1)
    c = (size - (total - vectors).abs().sum(-1)).clamp(min=0.0)  # (Q, N)
    return c / c.sum(-1, keepdim=True).clamp(min=1e-12)


def alti(trace: Trace) -> Alti:
    """ALTI+ of one traced sentence (module docstring)."""
    encoder, encoder_rows = None, []
    for block in trace.encoder:
        layer = contributions(token_vectors(block, own=True), block.out[0])  # (S, S)
        encoder = layer if encoder is None else layer @ encoder
        encoder_rows.append(encoder)
    assert encoder is not None
    sources = encoder.size(0)
    length = trace.decoder_self[0].weights.size(-1)
    flow = torch.cat([encoder.new_zeros(length, sources), torch.eye(length, device=encoder.device)], dim=1)
    source_rows, target_rows = [], []
    for own, cross in zip(trace.decoder_self, trace.cross, strict=True):
        flow = contributions(token_vectors(own, own=True), own.out[0]) @ flow
        c = contributions(token_vectors(cross, own=False), cross.out[0])  # (T, 1 + S)
        reads = torch.cat([c[:, 1:] @ encoder, encoder.new_zeros(length, length)], dim=1)
        flow = c[:, :1] * flow + reads
        source_rows.append(flow[:, :sources])
        target_rows.append(flow[:, sources:])
    source = torch.stack(source_rows)
    return Alti(
        source=source, target=torch.stack(target_rows), source_share=source[-1].sum(-1), encoder=torch.stack(encoder_rows)
    )


def layer_vectors(layer: Layer, x: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    """(T_i(x_j) (n, n, D), y (n, D)) of one layer's attention sublayer: x (n, D) the layer's
    input, weights (H, n, n) its attention."""
    attn, dt = layer.attn, torch.promote_types(x.dtype, torch.float32)
    x = x.to(dt)
    h = layer.attn_norm(x)
    n = x.size(0)
    v = attn.v(h).view(n, attn.kv_heads, attn.head_dim).transpose(0, 1)  # (KVH, n, Dh)
    v = v.repeat_interleave(attn.heads // attn.kv_heads, dim=0)  # (H, n, Dh)
    w_o = attn.o.weight.to(dt).view(-1, attn.heads, attn.head_dim)  # (D, H, Dh)
    f = torch.einsum("hnd,Dhd->hnD", v, w_o)  # (H, n, D)
    moved = torch.einsum("hqk,hkD->qkD", weights.to(dt), f)  # (n, n, D)
    bias = attn.o.bias.to(dt) if attn.o.bias is not None else torch.zeros_like(x[0])
    total = moved.sum(1) + bias  # (n, D): the attention sublayer's output
    post = layer.post_attn_norm
    if post is not None:  # Gemma: P_i(v) = v ⊙ (o + w) / rms(total_i)
        scale = torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + post.eps)  # (n, 1)
        gain = post.offset + post.weight.to(dt)
        moved, total = moved * (scale * gain)[:, None], total * scale * gain
    vectors = moved.clone()
    index = torch.arange(n, device=x.device)
    vectors[index, index] += x
    return vectors, x + total


@torch.inference_mode()
def decoder_only_alti(sentence: Sentence) -> Alti:
    """ALTI of one decoder-only sentence (module docstring): one teacher-forced pass over prompt +
    output[:-1] catching each layer's input and attention, heads switched off by the caller kept."""
    if sentence.source_span is None or not sentence.target_ids:
        raise ValueError("a decoder-only explanation needs the prompt's source span and an output")
    model = cast(DecoderOnlyLM, sentence.model)
    ids = [*sentence.source_ids, *sentence.target_ids][:-1]
    layers = [cast(Layer, layer) for layer in model.layers]
    out, caught = run_catching_inputs(model, list(layers), ids, need_weights=True)
    inputs = [x[0] for x in caught]  # each layer's input (n, D)
    assert out.attention is not None
    (s0, s1), first = sentence.source_span, len(sentence.source_ids) - 1
    flow: Tensor | None = None
    rows: list[Tensor] = []
    for i, layer in enumerate(layers):
        vectors, y = layer_vectors(layer, inputs[i], out.attention[0, i])
        c = contributions(vectors, y)  # (n, n)
        flow = c if flow is None else c @ flow
        rows.append(flow)
    r = torch.stack(rows)  # (L, n, n)
    source = r[:, first:, s0:s1]
    return Alti(source=source, target=r[:, first:, first:], source_share=source[-1].sum(-1),
                encoder=r[:, s0:s1, s0:s1])  # fmt: skip


def _cost(size: Size) -> int:
    """One vector per query-key pair of each sublayer: L_e·S² + L_d·T·(T+S+1)."""
    g, s, t = size.geometry, size.s, size.t
    return g.encoder_layers * s * s + g.decoder_layers * t * (t + s + 1)


def _floats(size: Size) -> int:
    g, s, t = size.geometry, size.s, size.t
    return g.decoder_layers * t * (s + t) + t + g.encoder_layers * s * s


def _json(found: Alti, decimals: int) -> dict[str, object]:
    parts = ("source", "target", "source_share", "encoder")
    return {"alti": {part: rounded(getattr(found, part), decimals) for part in parts}}


_ALTI_SCHEMA = {
    "type": "object",
    "title": "AltiExplanation",
    "required": ["source", "target", "source_share", "encoder"],
    "properties": {
        "source": {**nested(3), "description": "[layer][query][source token]: each source token's share of the target position after each decoder layer."},
        "target": {**nested(3), "description": "[layer][query][decoder input token] (the keys of decoder_self): the target prefix's shares; a row over source and target sums to 1."},
        "source_share": {**nested(1), "description": "[query] the last layer's source total: near 0 where a token comes from the prefix alone."},
        "encoder": {**nested(3), "description": "[layer][source][source]: ALTI through the encoder, what each encoder position is made of after each layer; rows sum to 1."},
    },
}  # fmt: skip

register(
    ExplainMethod(
        name="alti",
        label="ALTI+",
        long_label="ALTI+ (source part)",
        paper=(
            "Ferrando, Gállego, Alastruey, Escolano & Costa-jussà 2022, Towards Opening the Black Box of Neural "
            "Machine Translation: Source and Target Contributions to the Model's Output"
        ),
        url="https://aclanthology.org/2022.emnlp-main.599/",
        help=(
            "ALTI+ (Ferrando et al. 2022): each input token's contribution to a position after this layer, residual "
            "and layer norm included. Cross: the source part (a dim row took little from the source); decoder self: "
            "the target-prefix part. Per layer."
        ),
        runs={"transformer": lambda sentence: alti(sentence.trace), "decoder_only": decoder_only_alti},
        reasons={
            "recurrent": (
                "ALTI+ splits each layer's residual stream into one vector per input token; a GRU's "
                "recurrent state is not a sum of per-token vectors"
            ),
        },
        fields=(AnswerField("alti", "ALTI+ (Transformers).", _ALTI_SCHEMA),),
        encode=_json,
        draw=Draw(field="alti", parts={"cross": "source", "decoder_self": "target", "encoder_self": "encoder"}),
        cost=_cost,
        floats=_floats,
    )
)
