"""Which heads carry a noun's gender from English to German in the shipped en-de-transformer
(docs/inside.md, "Finding: gender"), and the patching grid's time on it.

For each minimal pair (the same number of tokens; the English noun decides the German article's
gender) it times the whole grid as ``POST /api/patch`` computes it (both head grids and the encoder
position grid, median of ``--repeats``), then reads the **article** (target position 0, written
before the noun) two ways:

- *noising* (what the route reports): the clean run with one head's output from the corrupted run;
  the drop in log p(article) says the head is **necessary**;
- *denoising*: the corrupted run with one head's output from the clean run (``patch`` with the two
  sources swapped); the rise says the head is **sufficient** to bring the gender back.

Each also for all heads of one layer at once and for every cross-attention head of every layer
(the decoder reads the source only through cross-attention, so that one equals the whole swap).
``--served`` also times ``POST /api/patch`` end to end on a real server serving only this model
(``ATTNSCOPE_TORCH_THREADS`` = ``--threads``): with the target given, and translating first.

    PYTHONPATH=. python bench/inside_gender.py [--threads 1] [--repeats 5] [--served]"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from attnscope.inside import trace as tracing
from attnscope.inside.patching import patch, patched_logits
from attnscope.repository import load_model_folder
from attnscope.testing import running_server
from attnscope.translator import Translator

PAIRS = [  # (clean, corrupted): equally many tokens; "nurse" is two pieces here, so no doctor/nurse pair
    ("A man is smiling.", "A woman is smiling."),  # Ein Mann / Eine Frau
    ("The man is reading.", "The woman is reading."),  # Der Mann / Die Frau
    ("A doctor is smiling.", "A teacher is smiling."),  # Ein Arzt / Eine Lehrerin: the model's own guess
]


def log_p_at(model: torch.nn.Module, source: list[int], target: list[int], position: int, edit: tracing.HeadEdit) -> float:
    """log p of target[position] with ``edit`` applied to the heads."""
    src, tgt = torch.tensor([source]), torch.tensor([target])
    lp = torch.log_softmax(patched_logits(model, src, tgt, edit).float(), -1)  # type: ignore[arg-type]
    return float(lp[0, position, target[position]])


def swapped_layers(model: torch.nn.Module, into: list[int], donor_ids: list[int], target: list[int], position: int) -> dict[str, float]:
    """Δ log p(target[position]) of the ``into`` run with all cross heads of one layer (``L1``…)
    or of every layer (``all``) taken from the ``donor_ids`` run."""
    with torch.no_grad():
        _, donor = tracing.run(model, torch.tensor([donor_ids]), torch.tensor([target]))  # type: ignore[arg-type]
    base = log_p_at(model, into, target, position, lambda i, k, h: h)
    layers = range(len(model.decoder_layers))  # type: ignore[arg-type]
    out = {}
    for chosen in [[i] for i in layers] + [list(layers)]:
        def edit(i: int, k: str, h: torch.Tensor, chosen: list[int] = chosen) -> torch.Tensor:
            return donor.heads[(i, k)] if k == "cross" and i in chosen else h

        name = f"L{chosen[0] + 1}" if len(chosen) == 1 else "all"
        out[name] = log_p_at(model, into, target, position, edit) - base
    return out


def top_heads(grid: torch.Tensor, n: int = 4) -> str:
    """The n largest |Δ| heads of a (L, H) grid, as "L3H6 −0.41"."""
    flat = grid.flatten()
    order = flat.abs().argsort(descending=True)[:n]
    return ", ".join(f"L{int(i) // grid.size(1) + 1}H{int(i) % grid.size(1)} {float(flat[i]):+.2f}" for i in order)


def served(folder: str, threads: int, repeats: int) -> None:
    """Median wall time of POST /api/patch for the first pair on a server of this model alone."""
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "models").mkdir()
        (Path(tmp) / "models" / Path(folder).name).symlink_to(Path(folder).resolve())
        env = {"ATTNSCOPE_TORCH_THREADS": str(threads)}
        with running_server(Path(tmp) / "models", Path(tmp) / "server.log", env=env) as url:
            clean, corrupted = PAIRS[0]
            body = {"model": Path(folder).name, "clean": clean, "corrupted": corrupted, "beam_size": 1}
            target = httpx.post(f"{url}/api/patch", json=body, timeout=120).json()["translation"]
            for _ in range(3):  # warm-up of both paths (the first calls of each are slower)
                httpx.post(f"{url}/api/patch", json=body | {"target": target}, timeout=120)
                httpx.post(f"{url}/api/patch", json=body, timeout=120)
            for name, extra in (("target given", {"target": target}), ("translating first", {})):
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    reply = httpx.post(f"{url}/api/patch", json=body | extra, timeout=120)
                    times.append(time.perf_counter() - start)
                    assert reply.status_code == 200, reply.text
                print(f"served POST /api/patch ({name}, threads={threads}): median {statistics.median(times):.3f} s, "
                      f"max {max(times):.3f} s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default="models/en-de-transformer")
    parser.add_argument("--served", action="store_true", help="also time POST /api/patch on a real server")
    args = parser.parse_args()
    if args.served:
        served(args.model, args.threads, args.repeats)
    torch.set_num_threads(args.threads)
    loaded = load_model_folder(args.model)
    model, tok, translator = loaded.model, loaded.tokenizer, Translator(loaded)
    for clean_text, corrupted_text in PAIRS:
        (clean,) = translator.translate([clean_text], beam_size=1)
        (other,) = translator.translate([corrupted_text], beam_size=1)
        corrupted = other.source_ids
        assert len(corrupted) == len(clean.source_ids), (clean_text, corrupted_text)
        patch(model, clean.source_ids, corrupted, clean.target_ids)  # warm-up
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            grids = patch(model, clean.source_ids, corrupted, clean.target_ids)
            times.append(time.perf_counter() - start)
        target = clean.target_ids
        article = tok.pieces(target[:1])[0]
        print(f"\n{clean_text!r} -> {clean.text!r}   vs {corrupted_text!r} -> {other.text!r}")
        print(f"  grid ({len(clean.source_ids)} source, {len(target)} target tokens, threads={args.threads}): "
              f"median {statistics.median(times):.3f} s, min {min(times):.3f} s")  # fmt: skip
        print(f"  whole swap: Δ log p per target token {[round(v, 2) for v in (grids.corrupted - grids.clean).tolist()]}"
              f" on {tok.pieces(target)}")  # fmt: skip
        noise = patch(model, clean.source_ids, corrupted, target, position=0)
        denoise = patch(model, corrupted, clean.source_ids, target, position=0)
        drop = float(noise.corrupted[0] - noise.clean[0])
        print(f"  article {article!r}: log p {float(noise.clean[0]):.2f} clean, {float(noise.corrupted[0]):.2f} corrupted "
              f"(Δ {drop:+.2f})")  # fmt: skip
        print(f"    noising, cross heads:    {top_heads(noise.heads['cross'])}; self heads max |Δ| "
              f"{float(noise.heads['self'].abs().max()):.2f}")  # fmt: skip
        print(f"    denoising, cross heads:  {top_heads(denoise.heads['cross'])}")
        with torch.no_grad():  # where each cross head looks while writing the article: weight on the noun (source 1)
            tgt_in = tracing.target_input(model, torch.tensor([target]))  # type: ignore[arg-type]
            cross = model(torch.tensor([clean.source_ids]), tgt_in, need_weights=True).cross[0, :, :, 0, 1]  # (L, H)
        print("    cross attention on the noun at the article (layer × head):")
        for row in cross.tolist():
            print("      " + " ".join(f"{v:.2f}" for v in row))
        print(f"    noising, a layer's cross heads:   {swapped_layers(model, clean.source_ids, corrupted, target, 0)}")
        print(f"    denoising, a layer's cross heads: {swapped_layers(model, corrupted, clean.source_ids, target, 0)}")
        print(f"    noising, encoder positions (rows embed, enc 1..): {tok.pieces(clean.source_ids)}")
        for row in noise.positions.tolist():
            print("      " + " ".join(f"{v:+.2f}" for v in row))


if __name__ == "__main__":
    main()
