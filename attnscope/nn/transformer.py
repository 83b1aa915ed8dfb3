"""The Transformer (Vaswani et al. 2017): shared source/target vocabulary with tied embeddings,
sinusoidal positions, pre- or post-norm layers, and incremental decoding with a key/value cache.

Imported models (:mod:`attnscope.hf`) use the same layers in the layout variants of
:class:`~attnscope.nn.config.TransformerConfig` (activation, learned positions, embedding and final
norms, an output bias or an untied output layer, and T5's pieces from :mod:`attnscope.nn.t5_parts`);
those decode through the general layer code."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import cast

import torch
from torch import Tensor, nn

from attnscope.nn import ablation, inference, layers, native, recording
from attnscope.nn.base import DecoderState, Seq2Seq, StepPath, reorder_encoder
from attnscope.nn.config import TransformerConfig
from attnscope.nn.kv_cache import KVCache, select_all
from attnscope.nn.layers import DecoderLayer, EncoderLayer
from attnscope.nn.outputs import EncoderOutput, Seq2SeqOutput, StepOutput
from attnscope.nn.t5_parts import RelativePositionBias, make_norm


def sinusoidal_positions(length: int, dim: int) -> Tensor:
    """(length, dim) fixed sinusoidal position encodings."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


@dataclass
class TransformerState:
    """Per-layer caches: self keys/values (N, H, t, Dh), written in place one position per step
    (:class:`~attnscope.nn.kv_cache.KVCache`); cross keys/values (G, H, S, Dh) and the source mask
    (G, 1, 1, S) are computed once per sentence from the encoder memory. ``group`` rows share a
    sentence's cross keys/values (the beams of beam search; rows ``n*group .. n*group+group-1``
    are sentence ``n``'s), so N = G * group."""

    self_cache: list[KVCache] | None
    cross_kv: list[tuple[Tensor, Tensor]]
    cross_mask: Tensor
    position: int = 0
    group: int = 1
    # the step path the plan chose (Transformer.init_state): the whole step in one native call
    # (``native``), the layers on weights prepared for decoding (``weights``), or neither: the
    # layers on the modules' own weights
    weights: list[layers.LayerWeights] | None = None
    native: native.NativeStep | native.NativeFp32Step | None = None

    @cached_property
    def cross_blocked(self) -> Tensor:
        """(G, 1, 1, S) True at padded source positions (the complement of ``cross_mask``)."""
        return ~self.cross_mask

    @property
    def self_kv(self) -> list[tuple[Tensor, Tensor]] | None:
        """Per layer, the self keys and values (N, H, t, Dh): views of the caches."""
        return None if self.self_cache is None else [c.pair() for c in self.self_cache]

    def advanced(self, caches: list[KVCache], by: int = 1) -> TransformerState:
        """This state ``by`` positions on, with the caches grown by them (a step's result)."""
        grown = TransformerState(
            caches, self.cross_kv, self.cross_mask, self.position + by, self.group, self.weights, self.native
        )
        grown.cross_blocked = self.cross_blocked
        return grown

    def reorder(self, indices: Tensor, group: int | None = None) -> TransformerState:
        """With ``group > 1`` (by default this state's), ``indices`` keeps groups: its rows
        ``j*group ..`` all come from one earlier sentence (beam search picks parents within a
        sentence; a ``group`` other than this state's regroups the rows, e.g. one row per sentence
        expanded into its beams). The per-sentence caches are then re-indexed only when sentences
        leave."""
        group = self.group if group is None else group
        cross_kv, cross_mask = self.cross_kv, self.cross_mask
        if group == 1 or indices.numel() != self.cross_mask.size(0) * group:
            # the earlier sentence of each new group
            sentences = indices if group == self.group == 1 else indices[::group] // self.group
            cross_kv = [(k.index_select(0, sentences), v.index_select(0, sentences)) for k, v in self.cross_kv]
            cross_mask = self.cross_mask.index_select(0, sentences)
        moved = TransformerState(
            self_cache=None if self.self_cache is None else select_all(self.self_cache, indices),
            cross_kv=cross_kv,
            cross_mask=cross_mask,
            position=self.position,
            group=group,
            weights=self.weights,
            native=self.native,
        )
        if cross_mask is self.cross_mask and "cross_blocked" in self.__dict__:
            moved.cross_blocked = self.cross_blocked
        return moved


class Transformer(Seq2Seq):
    config: TransformerConfig
    positions: Tensor

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        nn.init.normal_(self.embed.weight, std=c.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[c.pad_id].zero_()
        self.register_buffer("positions", sinusoidal_positions(c.max_positions, c.d_model), persistent=False)
        self.dropout = nn.Dropout(c.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        self.encoder_norm = make_norm(c) if c.has_final_norm else nn.Identity()
        self.decoder_norm = make_norm(c) if c.has_final_norm else nn.Identity()
        self.quantized_output: nn.Module | None = None  # an int8 copy of the tied output layer
        self._add_layout_parts(c)

    def _add_layout_parts(self, c: TransformerConfig) -> None:
        """The parts only imported layouts have (:attr:`TransformerConfig.standard_layout`):
        learned position tables, embedding norms, an output bias, an untied output layer, T5's
        relative position biases (one per stack, shared by its layers)."""
        if c.positions == "relative":
            self.encoder_relative = RelativePositionBias(c, bidirectional=True)
            self.decoder_relative = RelativePositionBias(c, bidirectional=False)
        if c.positions == "learned":
            self.encoder_positions = nn.Parameter(torch.zeros(c.max_positions, c.d_model))
            self.decoder_positions = nn.Parameter(torch.zeros(c.max_positions, c.d_model))
        if c.embedding_norm:
            self.encoder_embed_norm = nn.LayerNorm(c.d_model)
            self.decoder_embed_norm = nn.LayerNorm(c.d_model)
        if c.output_bias:
            self.output_bias = nn.Parameter(torch.zeros(c.vocab_size))
        if not c.tied_output:
            self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)

    def _embed(self, tokens: Tensor, offset: int = 0, *, encoder: bool = False) -> Tensor:
        """tokens: (B, T) -> (B, T, D) scaled embeddings plus positions (of the encoder's
        table or the decoder's, where the layout has two: ``positions="learned"``)."""
        c, length = self.config, tokens.size(1)
        if offset + length > c.max_positions:
            raise ValueError(f"sequence of {offset + length} tokens exceeds max_positions")
        x = self.embed(tokens)
        if c.scale_embedding:
            x = x * math.sqrt(c.d_model)
        side = "encoder" if encoder else "decoder"
        if c.positions != "relative":  # T5: positions enter as a bias on the attention scores
            table = self.positions if c.positions == "sinusoidal" else getattr(self, f"{side}_positions")
            x = x + table[offset : offset + length]
        if c.embedding_norm:
            x = getattr(self, f"{side}_embed_norm")(x)
        return self.dropout(x)

    def _relative_bias(self, side: str, queries: int, offset: int = 0) -> Tensor | None:
        """(1, H, Q, offset + Q) the self-attention bias of a stack (``side`` "encoder" or
        "decoder") for Q queries from ``offset`` on, with ``positions="relative"``; else None."""
        if self.config.positions != "relative":
            return None
        module = cast(RelativePositionBias, getattr(self, f"{side}_relative"))
        return module(queries, offset + queries, offset)

    def encode(self, src: Tensor, need_weights: bool = False) -> EncoderOutput:
        mask = self.source_mask(src)
        encoder = self._native_encoder()
        if encoder is not None:
            memory, weights = encoder(self._embed(src, encoder=True), mask)
            return EncoderOutput(memory=memory, mask=mask, encoder_self=weights if need_weights else None)
        real = self._real_rows(mask)
        if real is not None:
            return self._encode_packed(src, mask, real, need_weights)
        x = self._embed(src, encoder=True)
        attn_mask = mask[:, None, None, :]  # (B, 1, 1, S)
        bias = self._relative_bias("encoder", src.size(1))  # (1, H, S, S) or None
        rows = []
        for layer in self.encoder_layers:
            x, w = layer(x, attn_mask, need_weights, bias)
            rows.append(w)
        enc_self = torch.stack(rows, dim=1) if need_weights else None  # (B, L, H, S, S)
        return EncoderOutput(memory=self.encoder_norm(x), mask=mask, encoder_self=enc_self)

    def _native_encoder(self) -> native.NativeEncoder | None:
        """The native int8 encoder (:mod:`attnscope.nn.native`) when this model was quantised, is
        pre-norm, at inference with no head switched off or scores recorded; else None."""
        if self.step_path(1) != "native":
            return None
        parts = self.native_parts()
        return None if parts is None else parts[0]

    def step_path(self, rows: int) -> StepPath:
        """Which step decodes ``rows`` rows (chosen once per decode by the decode plan; every
        gate is here): the layers on the modules' weights while training or recording gradients,
        for the imported layouts, with heads switched off or scores recorded (the native steps
        know neither); else the native step of a pre-norm model where it applies (int8; float
        where every product of ``rows`` rows runs on packed fp16 weights,
        :func:`attnscope.nn.inference.packs`) and :func:`attnscope.nn.native.enabled`; else the layers on
        prepared weights."""
        c = self.config
        if not c.standard_layout or not self.plain_inference():
            return "general"
        if c.pre_norm and native.enabled() and (self.quantized_output is not None or inference.packs(rows)):
            return "native"
        return "prepared"

    def plain_inference(self) -> bool:
        """Decoding for inference only: not training, no gradients recorded, no head switched off
        and no scores recorded (what the fast step paths and the fixed-shape decoders leave out)."""
        return not self.training and inference.decoding() and not ablation.any_off() and not recording.active()

    def native_parts(self) -> tuple[native.NativeEncoder, native.NativeStep] | None:
        """The native int8 encoder and step of a quantised pre-norm model (None otherwise, or
        with ``ATTNSCOPE_NATIVE=0``), built on the first call and kept: a quantised model is
        for inference, its int8 weights are taken once (attnscope.nn.quantize)."""
        c = self.config
        if self.quantized_output is None or not c.pre_norm or not c.standard_layout or not native.enabled():
            return None
        if "_native_memo" not in self.__dict__:
            with torch.no_grad():
                self.__dict__["_native_memo"] = self._build_native()
        memo: tuple[native.NativeEncoder, native.NativeStep] | None = self.__dict__["_native_memo"]
        return memo

    def _build_native(self) -> tuple[native.NativeEncoder, native.NativeStep] | None:
        linear = layers.linear_product
        parts = []
        for module in self.encoder_layers:
            layer = cast(EncoderLayer, module)
            attn, (first, _, _, last) = layer.self_attn, layer.ff.net
            products = [layers.qkv_product(attn), *(linear(m) for m in (attn.out_proj, first, last))]
            parts.append((layer.res_attn.norm, layer.res_ff.norm, products))
        encoder = native.prepare_encoder(parts, self.encoder_norm, self.config.heads)
        output = None if self.quantized_output is None else linear(self.quantized_output)
        step = None if output is None else native.prepare(layers.prepare(self.decoder_layers), self.decoder_norm, output)
        return None if encoder is None or step is None else (encoder, step)

    def _real_rows(self, mask: Tensor) -> Tensor | None:
        """(B, S) source mask -> the flat indices of the real tokens, when inference may run the
        position-wise products on those only: a padded batch, no gradients (None otherwise)."""
        if not inference.decoding() or self.training or mask.size(0) == 1 or bool(mask.all()):
            return None
        return mask.reshape(-1).nonzero()[:, 0]

    def _encode_packed(self, src: Tensor, mask: Tensor, rows: Tensor, need_weights: bool) -> EncoderOutput:
        """:meth:`encode` of a padded batch at inference, the products only on real tokens
        (:meth:`EncoderLayer.packed`): a batch of 16 test sentences is about half padding, and
        the encoder was a fifth of a batch's decoding time. The memory is zero at the padding
        (the decoder's cross-attention masks it out)."""
        b, s = src.shape
        x = self._embed(src, encoder=True).reshape(b * s, -1).index_select(0, rows)  # (N, D)
        attn_mask = mask[:, None, None, :]  # (B, 1, 1, S)
        bias = self._relative_bias("encoder", s)  # (1, H, S, S) or None
        weights: list[Tensor] = []
        for layer in self.encoder_layers:
            x, w = cast(EncoderLayer, layer).packed(x, rows, (b, s), attn_mask, need_weights, bias)
            if w is not None:
                weights.append(w)
        x = self.encoder_norm(x)
        memory = x.new_zeros(b * s, x.size(-1)).index_copy_(0, rows, x).view(b, s, -1)
        enc_self = torch.stack(weights, dim=1) if need_weights else None  # (B, L, H, S, S)
        return EncoderOutput(memory=memory, mask=mask, encoder_self=enc_self)

    def init_state(self, enc: EncoderOutput, group: int = 1, *, path: StepPath | None = None) -> TransformerState:
        """The state of ``group`` rows per sentence of ``enc``, sharing its cross keys/values
        (made contiguous once here, so that no decoding step copies them), for the steps of
        ``path`` (the decode plan's; None: :meth:`step_path`'s for these rows). With gradients
        recorded the layers run on their own weights (the prepared ones carry no gradient); a
        native step that cannot be built (no library, weights not fp16 numbers) leaves the
        prepared layers."""
        cross, rows = [], self._real_rows(enc.mask)  # projected on the real positions only
        for layer in self.decoder_layers:
            k, v = cast(DecoderLayer, layer).cross_attn.project_kv(enc.memory, rows)
            cross.append((k.contiguous(), v.contiguous()))
        path = path or self.step_path(enc.mask.size(0) * group)
        if not inference.decoding():
            path = "general"
        weights = None if path == "general" else layers.prepare(self.decoder_layers)
        step: native.NativeStep | native.NativeFp32Step | None = None
        if path == "native":
            parts = self.native_parts()
            step = parts[1] if parts is not None else self._native_fp32(weights)
        return TransformerState(
            self_cache=None,
            cross_kv=cross,
            cross_mask=enc.mask[:, None, None, :],
            group=group,
            weights=weights,
            native=step,
        )

    def _native_fp32(self, weights: list[layers.LayerWeights] | None) -> native.NativeFp32Step | None:
        """The native float step (the Python step's operations in C++, the same bits) when the
        products are on packed fp16 weights (the shipped models), pre-norm, at inference."""
        if weights is None or self.training or self.quantized_output is not None or not native.enabled():
            return None
        output = inference.matrix_product(self.embed, "output", self.embed.weight)
        return native.prepare_fp32(weights, self.decoder_norm, output, self.embed.padding_idx or 0)

    def init_beams(
        self, enc: EncoderOutput, beam_size: int, *, path: StepPath | None = None
    ) -> tuple[EncoderOutput, TransformerState]:
        """Cross keys/values projected once per sentence and shared by its beams; ``step``
        reads the source mask from the state, so the encoder output stays one row per sentence."""
        return self.step_inputs(enc), self.init_state(enc, group=beam_size, path=path)

    def expand_beams(
        self, enc: EncoderOutput, state: DecoderState, indices: Tensor, beam_size: int
    ) -> tuple[EncoderOutput, TransformerState]:
        """The self caches re-indexed row by row; the cross keys/values and the encoder rows stay
        one per sentence (selected only when sentences have left), now shared by its beams."""
        assert isinstance(state, TransformerState) and state.group == 1
        sentences = indices[::beam_size]
        if sentences.numel() != enc.mask.size(0):  # some sentences finished on the first step
            enc = reorder_encoder(enc, sentences)
        return enc, state.reorder(indices, group=beam_size)

    def step_inputs(self, enc: EncoderOutput) -> EncoderOutput:
        """Only the source mask: a step reads the cross keys and values from the state, never the
        memory, which is kept as an empty (B, 0, D) view so that re-indexing it copies nothing."""
        return EncoderOutput(memory=enc.memory[:, :0], mask=enc.mask)

    def _decode(
        self, x: Tensor, state: TransformerState, self_mask: Tensor | None, need_weights: bool
    ) -> tuple[Tensor, TransformerState, Tensor | None, Tensor | None]:
        """The decoder stack on x (B, T, D), T new positions after the state's: every layer is
        :func:`attnscope.nn.layers.decoder_layer`, on the state's prepared weights where the plan chose
        them, else on the modules' own. Returns the normed output (B, T, D), the grown state and,
        if asked, the self (B, L, H, T, t) and cross (B, L, H, T, S) weights."""
        weights = state.weights or [layers.general(cast(DecoderLayer, layer)) for layer in self.decoder_layers]
        self_rows, cross_rows, caches = [], [], []
        bias = self._relative_bias("decoder", x.size(1), state.position)  # (1, H, T, t + T) or None
        for i, w in enumerate(weights):
            kv = layers.CacheAppend(KVCache() if state.self_cache is None else state.self_cache[i])
            x, sw, cw = layers.decoder_layer(
                w, x, kv, (self_mask, state.cross_mask), state.cross_kv[i], need_weights, bias
            )
            self_rows.append(sw)
            cross_rows.append(cw)
            caches.append(kv.cache)
        new_state = state.advanced(caches, by=x.size(1))
        if not need_weights:
            return self.decoder_norm(x), new_state, None, None
        return self.decoder_norm(x), new_state, torch.stack(self_rows, 1), torch.stack(cross_rows, 1)  # type: ignore[arg-type]

    def step(
        self, tokens: Tensor, state: TransformerState, enc: EncoderOutput, need_weights: bool = False
    ) -> tuple[StepOutput, TransformerState]:
        """One new token per row through the step path the state holds (:meth:`init_state`). On
        prepared weights attention always takes the explicit softmax, as the native steps do
        (the same bits whether or not the rows are asked for)."""
        if state.native is not None:
            return self._native_step(tokens, state, state.native, need_weights)
        x = self._embed(tokens[:, None], offset=state.position)  # (N, 1, D)
        y, state, self_w, cross_w = self._decode(x, state, None, need_weights or state.weights is not None)
        logits = self.logits(y[:, 0])  # (N, V)
        return (
            StepOutput(
                torch.log_softmax(logits.float(), dim=-1),
                cross=cross_w[:, :, :, 0] if need_weights and cross_w is not None else None,  # (N, L, H, S)
                decoder_self=self_w[:, :, :, 0] if need_weights and self_w is not None else None,  # (N, L, H, t)
            ),
            state,
        )

    def _native_step(
        self,
        tokens: Tensor,
        state: TransformerState,
        step: native.NativeStep | native.NativeFp32Step,
        need_weights: bool,
    ) -> tuple[StepOutput, TransformerState]:
        """:meth:`step` through a native step (:mod:`attnscope.nn.native`): int8, the same products as
        the Python step and the rest in loops; float, the Python step's own operations (the same
        bits). Attention is always computed: it is part of the step."""
        if state.position + 1 > self.config.max_positions:
            raise ValueError(f"sequence of {state.position + 1} tokens exceeds max_positions")
        n, d, heads = tokens.size(0), self.config.d_model, step.heads
        matrix = self.embed.weight
        past = state.self_cache or [KVCache() for _ in state.cross_kv]
        caches = [c.reserve(matrix, n, heads, d // heads) for c in past]
        blocked = state.cross_blocked
        log_probs, self_w, cross_w = step(
            tokens, (matrix, self.positions[state.position], math.sqrt(d)),
            [c.buffer.data for c in caches], caches[0].length - 1, state.cross_kv,  # type: ignore[union-attr]
            blocked,
        )
        grown = state.advanced(caches)
        out = StepOutput(log_probs, cross=cross_w if need_weights else None, decoder_self=self_w if need_weights else None)
        return out, grown

    def logits(self, y: Tensor) -> Tensor:
        """y: (..., D) decoder outputs -> (..., V) logits through the tied embedding matrix: when
        decoding, as a contiguous (D, V) matrix (attnscope.nn.inference), or its int8 copy when the
        model was quantised (attnscope.nn.quantize)."""
        c = self.config
        if c.scale_output:  # T5 with a tied output layer
            y = y * c.d_model**-0.5
        if not c.tied_output:
            logits = inference.linear(self.output, y)
        elif self.quantized_output is not None:
            logits = self.quantized_output(y)
        elif inference.decoding():
            logits = inference.matrix_product(self.embed, "output", self.embed.weight)(y)
        else:
            logits = nn.functional.linear(y, self.embed.weight)
        return logits + self.output_bias if c.output_bias else logits

    def forward(self, src: Tensor, tgt_in: Tensor, need_weights: bool = False) -> Seq2SeqOutput:
        enc = self.encode(src, need_weights=need_weights)
        length = tgt_in.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=src.device).tril()
        y, _, self_w, cross_w = self._decode(
            self._embed(tgt_in), self.init_state(enc, path="general"), causal[None, None], need_weights
        )
        return Seq2SeqOutput(
            logits=self.logits(y),
            encoder_self=enc.encoder_self,
            decoder_self=self_w,
            cross=cross_w,
        )
