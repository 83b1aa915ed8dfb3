"""Greedy decoding of a Transformer in fixed shapes, replayed as one CUDA graph per step on a GPU.

On a GPU, one sentence's decoder step is some 150 small kernels, each launched from Python: the
GPU waits on the launches (about 3 ms a step for the shipped 3+3-layer model, against well under
a millisecond of arithmetic). A CUDA graph records the step's kernels once and replays them with
one launch, but only over tensors that never move or change shape. So this decoder keeps every
buffer a step touches at a fixed size for the whole decode:

- the self-attention keys and values of every position up to a length budget ``Lc`` (the
  decoding budget rounded up to ``LENGTH_BUCKET``), written in place at the step's position;
  the attention runs over all ``Lc`` keys, the ones after the position masked to ``-inf`` (their
  weights are exactly zero, so the rows are those of the growing cache);
- the cross keys and values of the source rounded up to ``SOURCE_BUCKET`` positions (zero and
  masked beyond the real ones, as in a padded batch);
- the position (a one-element tensor the step increments), the input tokens, the outputs so far,
  and every attention row, written into ``(B, L, H, Lc, key)`` tensors at the step's position.

Finished sentences keep decoding (their extra tokens and rows are cut off at the end), which
costs nothing on a GPU at these sizes; the host asks whether all are done every ``CHECK_EVERY``
steps (one synchronisation each), so up to ``CHECK_EVERY - 1`` steps may run past the end.

The arithmetic is the decoder layer's, :func:`attnscope.nn.layers.decoder_layer` itself, given the
static buffers (the same prepared weights, the same products), so the outputs are greedy
decoding's: the tokens equal and the attention equal up to float rounding (softmax over the masked, longer rows sums in another order). Without a GPU the
same fixed-shape step runs eagerly (``graphs=False``), which is how the tests check it on the
CPU. :func:`applies` says when the decode plan takes this path: a Transformer on CUDA whose
step path is not the general one (at inference, no switched-off heads or recording), no prefix, not int8, and
``ATTNSCOPE_CUDA_GRAPHS=1`` (opt-in: the capture has not been run on a GPU yet; the fixed-shape
step itself is tested against greedy decoding on the CPU). A captured graph serves one call at a time; a call
that finds it busy takes the ordinary path instead of waiting.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import cast
from weakref import WeakKeyDictionary

import torch
from torch import Tensor, nn

from attnscope import config
from attnscope.decoding.output import DecodeOutput, check_stop, never_emit, plan_decoding
from attnscope.nn import layers
from attnscope.nn.base import Seq2Seq
from attnscope.nn.family import family_of
from attnscope.nn.transformer import Transformer

SOURCE_BUCKET = 16  # source positions are rounded up to a multiple of this
LENGTH_BUCKET = 32  # and the decoding budget to a multiple of this
CHECK_EVERY = 4  # steps between the host's "all finished?" checks
KEEP = 12  # captured shapes kept per model (least recently used dropped)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)  # batches are rounded up to one of these (bucketed)
logger = logging.getLogger(__name__)

Key = tuple[int, int, int]  # (batch, source capacity, length capacity)
RunnerKey = tuple[object, ...]  # Key, or another decoder's key (static_beam: ("beam", B, k, S, L))


def enabled() -> bool:
    """``ATTNSCOPE_CUDA_GRAPHS=1`` switches the graph path on (unset, ``0`` or anything else: off,
    until it has been timed on a GPU: see docs/decoding.md); ``Settings.cuda_graphs``, read afresh."""
    return bool(config.current("cuda_graphs"))


def applies(model: Seq2Seq, device: torch.device, prefix: Sequence[Sequence[int]] | None) -> bool:
    """Whether greedy decoding on ``device`` takes this path (see the module docstring)."""
    return (
        device.type == "cuda"
        and prefix is None
        and isinstance(model, Transformer)
        and fixed_shape_layout(model)
        and getattr(model, "quantized_output", None) is None
        and model.plain_inference()
        and enabled()
    )


def fixed_shape_layout(model: Transformer) -> bool:
    """Whether the fixed-shape step computes this Transformer: the shipped layout, and the imported
    ones whose decoder has no relative position bias (T5's) and the encoder's head count and
    size (every layer through its modules' own weights, :func:`attnscope.nn.layers.general`)."""
    c = model.config
    return family_of(c).fast_paths(c) or (
        c.positions != "relative" and c.decoder_heads is None and c.key_size_of("decoder") * c.heads == c.d_model
    )


def bucketed(src: Tensor, max_length: int | Sequence[int] | None) -> tuple[Tensor, int | Sequence[int] | None]:
    """src (B, S) with copies of its first sentence added up to the next of ``BATCH_BUCKETS``
    (and ``max_length``, when given per sentence, likewise), so that a server's batches of every
    size share a few captured graphs; :func:`trimmed` drops the copies' rows again. A copy is
    computed exactly as its original, so it changes no other row's result."""
    batch = src.size(0)
    size = next((b for b in BATCH_BUCKETS if b >= batch), batch)
    if size == batch:
        return src, max_length
    extra = size - batch
    if max_length is not None and not isinstance(max_length, int):
        max_length = [*max_length, *[max_length[0]] * extra]
    return torch.cat([src, src[:1].expand(extra, -1)]), max_length


def trimmed(out: DecodeOutput, batch: int) -> DecodeOutput:
    """``out`` of a :func:`bucketed` batch cut back to its first ``batch`` sentences."""
    if out.tokens.size(0) == batch:
        return out
    length = int(out.lengths[:batch].max())

    def rows(t: Tensor | None, query_dim: int | None = None) -> Tensor | None:
        if t is None:
            return None
        t = t[:batch]
        return t if query_dim is None else t.narrow(query_dim, 0, length)

    decoder_self = rows(out.decoder_self, 3)
    return DecodeOutput(
        tokens=out.tokens[:batch, :length], lengths=out.lengths[:batch], source_lengths=out.source_lengths[:batch],
        scores=out.scores[:batch], token_logprobs=out.token_logprobs[:batch, :length],
        encoder_self=rows(out.encoder_self), cross=rows(out.cross, 3),
        decoder_self=None if decoder_self is None else decoder_self[..., :length],
    )  # fmt: skip


def capacities(source_length: int, limit: int, max_positions: int) -> tuple[int, int] | None:
    """(source capacity, length capacity) for a source of ``source_length`` positions and a
    budget of ``limit`` steps, or None when the budget exceeds the model's positions (the
    ordinary path reports that)."""
    if limit > max_positions:
        return None
    source = -(-source_length // SOURCE_BUCKET) * SOURCE_BUCKET
    length = min(-(-limit // LENGTH_BUCKET) * LENGTH_BUCKET, max_positions)
    return source, length


class StaticGreedy:
    """The fixed-size buffers of one (batch, source capacity, length capacity) and its step."""

    @property
    def model(self) -> Transformer:
        model = self._model()
        if model is None:  # only a caller that kept a runner past its model's life gets here
            raise RuntimeError("this decoding runner's model has been freed")
        return model

    def __init__(self, model: Transformer, key: Key, device: torch.device) -> None:
        weights = layers.prepare(model.decoder_layers) if model.config.standard_layout else None
        if weights is None:  # an imported layout: each layer through its modules' own weights
            weights = [layers.general(cast(layers.DecoderLayer, layer)) for layer in model.decoder_layers]
        # The model weakly: ``_runners`` is keyed weakly by it, and a runner that held it would
        # keep every unloaded model (and its GPU memory) alive for good.
        self._model, self.weights = weakref.ref(model), weights
        self.lock = threading.Lock()
        self.graph: torch.cuda.CUDAGraph | None = None
        c = model.config
        batch, source, length = key
        count, heads, dh = len(weights), c.heads, c.d_model // c.heads
        with torch.inference_mode(False), torch.no_grad():  # plain tensors: usable in either mode
            def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
                return torch.zeros(*shape, dtype=dtype, device=device)

            self.tokens = zeros(batch, dtype=torch.long)
            self.position = zeros(1, dtype=torch.long)
            self.key_positions = torch.arange(length, device=device)
            dtype = model.embed.weight.dtype  # fp16/bf16 models keep their keys, values and rows so
            self.self_kv = [zeros(2, batch, heads, length, dh, dtype=dtype) for _ in range(count)]
            self.cross_kv = [
                (zeros(batch, heads, source, dh, dtype=dtype), zeros(batch, heads, source, dh, dtype=dtype))
                for _ in range(count)
            ]
            self.source_mask = torch.zeros(batch, 1, 1, source, dtype=torch.bool, device=device)
            self.limits = zeros(batch, dtype=torch.long)
            self.lengths = zeros(batch, dtype=torch.long)
            self.done = zeros(batch, dtype=torch.bool)
            self.out_tokens = zeros(batch, length, dtype=torch.long)
            self.out_lp = zeros(batch, length)
            self.self_rows = zeros(batch, count, heads, length, length, dtype=dtype)
            self.cross_rows = zeros(batch, count, heads, length, source, dtype=dtype)

    def load(self, cross_kv: list[tuple[Tensor, Tensor]], cross_mask: Tensor, limits: Tensor) -> None:
        """Start a decode: the sentences' cross keys/values (B, H, S, Dh) and mask (B, 1, 1, S),
        each sentence's budget (B,)."""
        self.load_source(cross_kv, cross_mask)
        with torch.no_grad():
            self.limits.copy_(limits)
            self.lengths.copy_(limits)
            self.done.zero_()

    def load_source(self, cross_kv: list[tuple[Tensor, Tensor]], cross_mask: Tensor) -> None:
        """The rows' cross keys/values (N, H, S, Dh) and mask (N, 1, 1, S), zero and masked past S;
        every row back at the first position with BOS as its input."""
        s = cross_mask.size(-1)
        with torch.no_grad():
            for (k, v), (k_buf, v_buf) in zip(cross_kv, self.cross_kv, strict=True):
                k_buf[:, :, :s].copy_(k)
                k_buf[:, :, s:].zero_()
                v_buf[:, :, :s].copy_(v)
                v_buf[:, :, s:].zero_()
            self.source_mask[..., :s].copy_(cross_mask)
            self.source_mask[..., s:].fill_(False)
            self.tokens.fill_(self.model.config.bos_id)
            self.position.zero_()

    def _layer(self, index: int, w: layers.LayerWeights, x: Tensor, written: Tensor) -> Tensor:
        """:func:`attnscope.nn.layers.decoder_layer` on the fixed buffers: x (N, 1, D); the keys and
        values written at the position, attention over the ``written`` ones (Lc,); records the
        rows."""
        pos, cache = self.position, self.self_kv[index]  # cache (2, N, H, Lc, Dh)

        def kv(new: Tensor) -> tuple[Tensor, Tensor]:  # new (2, N, H, 1, Dh)
            cache.index_copy_(3, pos, new)
            return cache[0], cache[1]

        masks = (written, self.source_mask)
        x, self_w, cross_w = layers.decoder_layer(w, x, kv, masks, self.cross_kv[index], True)
        self.self_rows[:, index].index_copy_(2, pos, self_w)  # type: ignore[arg-type]  # (N, H, 1, Lc)
        self.cross_rows[:, index].index_copy_(2, pos, cross_w)  # type: ignore[arg-type]  # (N, H, 1, Sc)
        return x

    def step(self) -> None:
        """One decoder step over the buffers (what the graph records): embed the input tokens at
        the position, run the layers, pick each row's best token, record it, move on."""
        m, c = self.model, self.model.config
        pos = self.position
        x = self.embed()
        written = self.key_positions.le(pos)  # (Lc,) keys written so far
        for index, w in enumerate(self.weights):
            x = self._layer(index, w, x, written)
        log_probs = torch.log_softmax(m.logits(m.decoder_norm(x[:, 0])).float(), dim=-1)
        logp, tokens = never_emit(log_probs, c.pad_id, c.bos_id, inplace=True).max(dim=-1)
        finished = tokens.eq(c.eos_id) | self.limits.le(pos + 1)
        self.lengths.copy_(torch.where(finished & ~self.done, pos + 1, self.lengths))
        self.done.logical_or_(finished)
        self.out_tokens.index_copy_(1, pos, tokens[:, None])
        self.out_lp.index_copy_(1, pos, logp[:, None])
        self.tokens.copy_(tokens)
        pos.add_(1)

    def embed(self) -> Tensor:
        """The input tokens at the position (N, 1, D), as :meth:`Transformer._embed` computes them
        (the position a tensor here, so that a graph replays it at every step)."""
        m, c = self.model, self.model.config
        x = nn.functional.embedding(self.tokens, m.embed.weight, m.embed.padding_idx)
        if c.scale_embedding:
            x = x * math.sqrt(c.d_model)
        table = m.positions if c.positions == "sinusoidal" else m.decoder_positions
        x = (x + table.index_select(0, self.position))[:, None]  # (N, 1, D)
        return m.decoder_embed_norm(x) if c.embedding_norm else x

    def capture(self) -> None:
        """Record :meth:`step` as a CUDA graph (after two warm-up steps on a side stream, as
        capture requires); the buffers must be loaded, and are loaded again before any use."""
        device = self.tokens.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self.step()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # a server's other threads go on
            self.step()
        self.graph = graph

    def run(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.step()


class _Runners:
    """Per model, the StaticGreedy of each shape used lately, and the parameters they were made
    for (a model trained further gets new ones)."""

    def __init__(self) -> None:
        self.by_key: OrderedDict[RunnerKey, StaticGreedy] = OrderedDict()
        self.params: tuple[tuple[int, int], ...] = ()


_runners: WeakKeyDictionary[nn.Module, _Runners] = WeakKeyDictionary()
_lock = threading.Lock()
_capture_failed = False  # set when a capture raised: later calls do not try again


def _runner(model: Transformer, key: Key, device: torch.device, graphs: bool) -> tuple[StaticGreedy, bool]:
    """A greedy runner of ``key`` for ``model`` (new or kept) and whether it is new."""
    return runner_for(model, key, device, graphs, lambda: StaticGreedy(model, key, device))


def runner_for(
    model: Transformer, key: RunnerKey, device: torch.device, graphs: bool, make: Callable[[], StaticGreedy]
) -> tuple[StaticGreedy, bool]:
    """The runner of ``key`` for ``model`` (kept from an earlier call, or ``make()``'s) and whether
    it is new; a model's runners of every kind share one least-recently-used bound (``KEEP``)."""
    params = tuple((p._version, p.data_ptr()) for p in model.parameters())
    with _lock:
        entry = _runners.setdefault(model, _Runners())
        if entry.params != params:
            entry.by_key.clear()
            entry.params = params
        runner = entry.by_key.get(key)
        if runner is not None and (runner.graph is not None) == graphs:
            entry.by_key.move_to_end(key)
            return runner, False
        runner = make()
        entry.by_key[key] = runner
        entry.by_key.move_to_end(key)
        while len(entry.by_key) > KEEP:
            entry.by_key.popitem(last=False)
        return runner, True


def capture_failed() -> bool:
    """Whether a capture has failed in this process (later decodes then run the steps eagerly)."""
    return _capture_failed


def capture(runner: StaticGreedy) -> None:
    """Capture the runner's step; if this torch or GPU cannot, say so once and go on without
    graphs from then on (the same fixed-shape step, run eagerly)."""
    global _capture_failed
    try:
        runner.capture()
    except RuntimeError as err:  # e.g. an operation capture does not support
        _capture_failed = True
        logger.warning("CUDA graph capture failed (%s); decoding runs its fixed-shape steps without graphs", err)


@torch.no_grad()
def static_greedy_decode(
    model: Seq2Seq,
    src: Tensor,
    *,
    need_weights: bool = True,
    max_len_ratio: float = 1.5,
    max_len_offset: int = 10,
    max_length: int | Sequence[int] | None = None,
    should_stop: Callable[[], bool] | None = None,
    graphs: bool | None = None,
) -> DecodeOutput | None:
    """:func:`~attnscope.decoding.greedy.greedy_decode` without a prefix, in fixed shapes; ``graphs``
    (default: on CUDA) replays each step as a CUDA graph. Returns None when this path cannot
    take the call (the budget exceeds the model's positions, or the shape's graph is serving
    another call): the caller decodes the ordinary way. ``should_stop`` is asked before the
    first step and at every check (every ``CHECK_EVERY`` steps). The batch is rounded up to a
    bucket (:func:`bucketed`)."""
    batch = src.size(0)
    src, max_length = bucketed(src, max_length)
    model = cast(Transformer, model)
    c = model.config
    _, limits = plan_decoding(c, src, None, ratio=max_len_ratio, offset=max_len_offset, max_length=max_length)
    limit = max(limits)
    caps = capacities(src.size(1), limit, c.max_positions)
    if caps is None:
        return None
    graphs = src.device.type == "cuda" and not _capture_failed if graphs is None else graphs
    runner, new = _runner(model, (src.size(0), *caps), src.device, graphs)
    if not runner.lock.acquire(blocking=False):
        return None
    try:
        check_stop(should_stop, 0)
        enc = model.encode(src, need_weights=need_weights)
        state = model.init_state(enc)
        row_limits = torch.tensor(limits, device=src.device)
        runner.load(state.cross_kv, state.cross_mask, row_limits)
        if new and graphs:
            capture(runner)
            runner.load(state.cross_kv, state.cross_mask, row_limits)
        steps = 0
        while steps < limit:
            runner.run()
            steps += 1
            if steps % CHECK_EVERY == 0 or steps == limit:
                if bool(runner.done.all()):
                    break
                check_stop(should_stop, steps)
        lengths = runner.lengths.clone()
        length = int(lengths.max())
        real = torch.arange(length, device=src.device)[None, :] < lengths[:, None]  # (B, T)
        tokens = runner.out_tokens[:, :length].masked_fill(~real, c.pad_id)
        token_lp = runner.out_lp[:, :length] * real
        cross = decoder_self = None
        if need_weights:
            rows = real[:, None, None, :, None]
            cross = runner.cross_rows[:, :, :, :length, : src.size(1)] * rows
            decoder_self = runner.self_rows[:, :, :, :length, :length] * rows
        out = DecodeOutput(
            tokens=tokens,
            lengths=lengths,
            source_lengths=enc.mask.sum(1),
            scores=token_lp.sum(1),
            token_logprobs=token_lp,
            encoder_self=enc.encoder_self,
            cross=cross,
            decoder_self=decoder_self,
        )
        return trimmed(out, batch)
    finally:
        runner.lock.release()
