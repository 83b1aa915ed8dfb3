"""Time one activation-patching run (both head grids and the encoder position grid) and the lens
on the shipped en-de-transformer, and print the man/woman finding (docs/inside.md).

    PYTHONPATH=. python bench/inside_patch.py [--threads N] [--repeats 5]"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnscope.inside import trace as tracing
from attnscope.inside.lens import inspect
from attnscope.inside.patching import patch, patched_logits
from attnscope.repository import load_model_folder
from attnscope.translator import Translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default="models/en-de-transformer")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model_folder(args.model)
    translator, tok = Translator(loaded), loaded.tokenizer
    (clean,) = translator.translate(["The man is reading."], beam_size=1)
    corrupted = translator.source_ids("The woman is reading.")
    patch(loaded.model, clean.source_ids, corrupted, clean.target_ids)  # warm-up
    times, lens_times = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        grids = patch(loaded.model, clean.source_ids, corrupted, clean.target_ids)
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        inspect(loaded.model, clean.source_ids, clean.target_ids)
        lens_times.append(time.perf_counter() - start)
    print(f"threads={args.threads}  patch (all grids): median {statistics.median(times):.3f} s, "
          f"lens+DLA: median {statistics.median(lens_times):.3f} s")
    print("target:", tok.pieces(clean.target_ids), "clean log p:", [round(v, 2) for v in grids.clean.tolist()],
          "corrupted:", [round(v, 2) for v in grids.corrupted.tolist()])
    for kind in ("cross", "self"):
        print(f"{kind} heads Δ log p (layer × head):")
        for row in grids.heads[kind].tolist():
            print("  " + " ".join(f"{v:+.3f}" for v in row))
    print("encoder positions Δ (row × source):", tok.pieces(clean.source_ids))
    for row in grids.positions.tolist():
        print("  " + " ".join(f"{v:+.2f}" for v in row))
    whole_layers(loaded.model, clean.source_ids, corrupted, clean.target_ids)
    for t in range(len(clean.target_ids)):
        one = patch(loaded.model, clean.source_ids, corrupted, clean.target_ids, position=t)
        best = one.heads["cross"].abs().flatten().topk(3)
        heads = [f"L{int(i) // one.heads['cross'].size(1) + 1}H{int(i) % one.heads['cross'].size(1)}" for i in best.indices]
        print(f"position {t} {tok.pieces([clean.target_ids[t]])[0]!r}: total "
              f"{float(one.corrupted[t] - one.clean[t]):+.2f}, largest cross heads {heads} {best.values.tolist()}")


def whole_layers(model: torch.nn.Module, clean: list[int], corrupted: list[int], target: list[int]) -> None:
    """Δ log p(target) patching all heads of one attention at once (the redundancy check)."""
    src, tgt = torch.tensor([clean]), torch.tensor([target])
    with torch.no_grad():
        _, donor = tracing.run(model, torch.tensor([corrupted]), tgt)  # type: ignore[arg-type]

    def log_p(edit: tracing.HeadEdit) -> float:
        lp = torch.log_softmax(patched_logits(model, src, tgt, edit), -1)  # type: ignore[arg-type]
        return float(lp[0, torch.arange(len(target)), tgt[0]].sum())

    base = log_p(lambda i, k, h: h)
    for kind in ("cross", "self"):
        deltas = []
        for layer in range(len(model.decoder_layers)):  # type: ignore[arg-type]
            deltas.append(log_p(lambda i, k, h, layer=layer, kind=kind: donor.heads[(i, k)] if (i, k) == (layer, kind) else h) - base)
        print(f"all {kind} heads of a layer:", " ".join(f"L{i + 1} {d:+.2f}" for i, d in enumerate(deltas)))


if __name__ == "__main__":
    main()
