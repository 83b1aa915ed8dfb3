"""Where a decoding step's time goes on one core: attnscope's Transformer step, its matrix
products alone, and CTranslate2's step, on the same weights and sentences.

    .venv/bin/pip install -e '.[bench]'        # ctranslate2 (optional: without it, no CT2 rows)
    .venv/bin/python bench/step_accounting.py [--model models/en-de-transformer] [--rounds 6]

Every system decodes each of ``--sentences`` test2016 sentences alone for exactly ``--short`` and
exactly ``--long`` steps (CTranslate2 with ``min_decoding_length = max_decoding_length``;
attnscope's decoder stepped by hand, every attention matrix kept); the difference divided by the
number of extra steps is the cost of one step, the rest the fixed cost of a sentence (encoding,
cross keys/values, set-up). Rows:

- ``attnscope``: one row per step (greedy), every attention matrix returned;
- ``attnscope, 5 rows``: the same with the 5 rows of beam search (the model only, no search);
- ``products only``: the step's 19 matrix products (the fused self-attention QKV, out, cross
  query, cross out, two feed-forward products per layer, the tied output projection) in the
  decoder's own layout, on one row: the memory-bound floor of a batch-1 step;
- ``ct2`` / ``ct2 int8`` / ``ct2 beam 5``: CTranslate2 fp32, int8, and beam 5 (search included).

Rounds alternate the systems; medians over rounds after a warm-up. CPU time of the process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from attnscope.nn import inference  # noqa: E402
from attnscope.nn.layers import prepare  # noqa: E402
from attnscope.nn.transformer import Transformer  # noqa: E402
from attnscope.repository import load_model_folder  # noqa: E402
from bench.peers import converted, padded, test_sentences  # noqa: E402

Steps = Callable[[int], None]  # decode every sentence for exactly n steps


def attnscope_steps(model: Transformer, sources: list[torch.Tensor], rows: int) -> Steps:
    bos = model.config.bos_id

    def run(n: int) -> None:
        for src in sources:
            enc = model.encode(src, need_weights=True)
            inputs, state = model.init_beams(enc, rows)
            tokens = torch.full((rows,), bos)
            for _ in range(n):
                out, state = model.step(tokens, state, inputs, need_weights=True)
                tokens = out.log_probs.argmax(-1)

    return run


def products_only(model: Transformer, count: int) -> Steps:
    layers = prepare(model.decoder_layers)
    assert layers is not None
    output = inference.matrix_product(model.embed, "output", model.embed.weight)  # (D,) -> (V,)
    d, ff = model.config.d_model, model.config.ff_dim
    x, hidden = torch.randn(1, d), torch.randn(1, ff)

    def run(n: int) -> None:
        for _ in range(count * n):
            for w in layers:
                assert w.ff_in is not None and w.ff_out is not None
                w.qkv(x), w.self_out(x), w.cross_q(x), w.cross_out(x), w.ff_in(x), w.ff_out(hidden)
            output(x)

    return run


def ct2_steps(path: Path, pieces: list[list[str]], compute_type: str, beam: int) -> Steps:
    import ctranslate2

    translator = ctranslate2.Translator(
        str(path), device="cpu", compute_type=compute_type, intra_threads=1, inter_threads=1
    )

    def run(n: int) -> None:
        for source in pieces:
            translator.translate_batch(
                [source], beam_size=beam, min_decoding_length=n, max_decoding_length=n, return_attention=True
            )

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/en-de-transformer")
    parser.add_argument("--data-dir", default=os.environ.get("ATTNSCOPE_DATA_DIR", "data/multi30k"))
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--short", type=int, default=4)
    parser.add_argument("--long", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default="out/peers", help="where bench/peers.py keeps its CTranslate2 copy (reused)")
    args = parser.parse_args()
    if args.long <= args.short:
        raise SystemExit("--long must be larger than --short")

    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    loaded = load_model_folder(args.model)
    model = loaded.model
    if not isinstance(model, Transformer):
        raise SystemExit(f"{args.model}: only Transformers have this step")
    model.eval()
    ids = test_sentences(loaded, Path(args.data_dir), args.sentences)
    sources = [padded([s], model.config.pad_id) for s in ids]
    systems: dict[str, Steps] = {
        "attnscope": attnscope_steps(model, sources, 1),
        "attnscope, 5 rows": attnscope_steps(model, sources, 5),
        "products only": products_only(model, len(sources)),
    }
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        print("ctranslate2 is not installed (pip install -e '.[bench]'): no CT2 rows")
    else:
        path = converted(loaded, args.model, Path(args.out))
        pieces = [[loaded.tokenizer.sp.id_to_piece(i) for i in s] for s in ids]
        systems["ct2"] = ct2_steps(path, pieces, "float32", 1)
        systems["ct2 int8"] = ct2_steps(path, pieces, "int8", 1)
        systems["ct2 beam 5"] = ct2_steps(path, pieces, "float32", 5)

    times: dict[tuple[str, int], list[float]] = {}
    names = list(systems)
    for r in range(args.rounds + 1):  # the first round warms up
        for name in names[r % len(names) :] + names[: r % len(names)]:
            for n in (args.short, args.long):
                start = time.process_time()
                systems[name](n)
                if r:
                    times.setdefault((name, n), []).append((time.process_time() - start) * 1000 / len(sources))

    extra = args.long - args.short
    print(f"\n{args.model}, {len(sources)} test2016 sentences alone, 1 thread, CPU ms (median of {args.rounds})\n")
    print("| system | per step | fixed per sentence |")
    print("| --- | ---: | ---: |")
    for name in names:
        short, long = (statistics.median(times[(name, n)]) for n in (args.short, args.long))
        step = (long - short) / extra
        print(f"| {name} | {step:.3f} | {short - args.short * step:.2f} |")


if __name__ == "__main__":
    main()
