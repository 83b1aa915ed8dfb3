"""Decoding speed: incremental greedy and beam search with attention returned, against the same
decoding without attention (fused SDPA kernel, no weights) and against a naive decoder that
re-runs the full forward pass on the growing prefix at every step (``bench/naive.py``).

    .venv/bin/python bench/decode.py [--device cuda] [--repeats 3] [--length 40]

The model is a Transformer of the size we ship with random weights. Random weights may emit EOS at
any step, so sentences and hypotheses would stop at different, arbitrary points and the decoders
would not do the same amount of work. To force a fixed length, the model is wrapped in ``NoEos``,
which sets the EOS log-probability to -inf in ``step`` and ``forward`` (one ``masked_fill`` of a
(N, V) tensor per step, the same for every decoder). Nothing else changes: every decoder runs
exactly ``--length`` steps for every sentence (beam search: every hypothesis, finished at the
length limit), through the real encoder, caches and attention code. Before timing, the naive
decoders are checked to give the same tokens as the incremental ones.

Times are the median of ``--repeats`` runs after one warm-up run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from attnscope.decoding import DecodeOutput, beam_search, greedy_decode  # noqa: E402
from attnscope.nn import build_model  # noqa: E402
from attnscope.nn.base import DecoderState, Seq2Seq, StepPath  # noqa: E402
from attnscope.nn.config import TransformerConfig  # noqa: E402
from attnscope.nn.outputs import EncoderOutput, Seq2SeqOutput, StepOutput  # noqa: E402
from bench.naive import naive_beam, naive_greedy  # noqa: E402

Decoder = Callable[..., DecodeOutput]


class NoEos(Seq2Seq):
    """A model that never ends a sentence: EOS gets log-probability -inf (see the docstring)."""

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.inner = model
        self.config = model.config

    def encode(self, src: Tensor, need_weights: bool = False) -> EncoderOutput:
        return self.inner.encode(src, need_weights=need_weights)

    def init_state(self, enc: EncoderOutput, *, path: StepPath | None = None) -> DecoderState:
        return self.inner.init_state(enc, path=path)

    def step_path(self, rows: int) -> StepPath:
        return self.inner.step_path(rows)

    def init_beams(
        self, enc: EncoderOutput, beam_size: int, *, path: StepPath | None = None
    ) -> tuple[EncoderOutput, DecoderState]:
        return self.inner.init_beams(enc, beam_size, path=path)

    def step(
        self, tokens: Tensor, state: DecoderState, enc: EncoderOutput, need_weights: bool = False
    ) -> tuple[StepOutput, DecoderState]:
        out, state = self.inner.step(tokens, state, enc, need_weights=need_weights)
        out.log_probs[:, self.config.eos_id] = float("-inf")
        return out, state

    def forward(self, src: Tensor, tgt_in: Tensor, need_weights: bool = False) -> Seq2SeqOutput:
        out = self.inner(src, tgt_in, need_weights=need_weights)
        out.logits[..., self.config.eos_id] = float("-inf")
        return out


def shipped_transformer(heads: int) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=8000,
        d_model=256,
        heads=heads,
        ff_dim=1024,
        encoder_layers=3,
        decoder_layers=3,
    )


def random_source(batch: int, length: int, vocab: int, device: torch.device) -> Tensor:
    """(B, S) random ids of 18 to ``length`` tokens ending with EOS, right-padded."""
    g = torch.Generator().manual_seed(batch)
    lengths = torch.randint(max(2, length - 2), length + 1, (batch,), generator=g)
    lengths[0] = length
    src = torch.zeros(batch, length, dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        src[b, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        src[b, n - 1] = 3
    return src.to(device)


def timed(
    run: Callable[[], DecodeOutput], repeats: int, device: torch.device, warm: bool = False
) -> float:
    """Median seconds of ``repeats`` runs, after one warm-up run (skipped when ``warm``: the
    caller has just run it)."""

    def once() -> float:
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    if not warm:
        once()
    return statistics.median(once() for _ in range(repeats))


def check_same(a: DecodeOutput, b: DecodeOutput, what: str) -> None:
    if not torch.equal(a.tokens, b.tokens):
        raise SystemExit(f"{what}: naive and incremental decoders disagree on the tokens")
    if a.cross is not None and b.cross is not None:
        diff = (a.cross - b.cross).abs().max().item()
        if diff > 1e-4:
            raise SystemExit(f"{what}: cross-attention differs by {diff:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--length", type=int, default=40, help="output tokens per sentence")
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--heads", type=int, default=8, help="8, as in the shipped Transformers")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (CPU)")
    args = parser.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device available")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = shipped_transformer(args.heads)
    model = NoEos(build_model(config).to(device).eval())
    print(
        f"Transformer d_model={config.d_model} heads={config.heads} ff={config.ff_dim} "
        f"layers={config.encoder_layers}+{config.decoder_layers} vocab={config.vocab_size} "
        f"({model.num_parameters / 1e6:.1f}M params), random weights, EOS masked | "
        f"device={device} threads={torch.get_num_threads()} torch={torch.__version__}"
    )
    print(
        f"source ~{args.source_length} tokens, {args.length} output tokens, "
        f"median of {args.repeats} runs after a warm-up\n"
    )

    decoders: dict[str, tuple[Decoder, Decoder, dict[str, int]]] = {
        "greedy": (greedy_decode, naive_greedy, {}),
        f"beam-{args.beam}": (beam_search, naive_beam, {"beam_size": args.beam}),
    }
    header = (
        f"{'decoder':<8} {'batch':>5} | {'attn (s)':>9} {'no attn (s)':>11} {'naive attn (s)':>14} | "
        f"{'naive/incr':>10} {'attn/no-attn':>12} | {'tok/s attn':>10}"
    )
    print(header)
    print("-" * len(header))
    with torch.inference_mode():
        for name, (incremental, naive, extra) in decoders.items():
            for batch in args.batches:
                src = random_source(batch, args.source_length, config.vocab_size, device)
                kw = dict(max_length=args.length, **extra)
                # the check runs both decoders once: that is their warm-up run
                check_same(
                    naive(model, src, **kw), incremental(model, src, **kw), f"{name} x{batch}"
                )
                t_attn = timed(partial(incremental, model, src, **kw), args.repeats, device, True)
                t_none = timed(
                    partial(incremental, model, src, need_weights=False, **kw), args.repeats, device
                )
                t_naive = timed(partial(naive, model, src, **kw), args.repeats, device, True)
                print(
                    f"{name:<8} {batch:>5} | {t_attn:>9.3f} {t_none:>11.3f} {t_naive:>14.3f} | "
                    f"{t_naive / t_attn:>9.1f}x {t_attn / t_none:>11.2f}x | "
                    f"{batch * args.length / t_attn:>10.0f}"
                )


if __name__ == "__main__":
    main()
