"""Batch throughput of an opus-mt-shaped Marian (6+6 layers, 512 wide, 58,101-token vocabulary,
random weights built with ``transformers``), imported into attnscope, against CTranslate2 on the
same model, GPU and precision: target tokens per second at batch 32, beam 4, fp16.

    python bench/marian_ct2.py [--device cuda] [--sentences 256] [--max-length 64] [--runs 3]

Rows, timed interleaved (each run times every row once, in turn; the median run counts):
- attnscope, every attention matrix (encoder self, decoder self, cross; every layer and head)
  copied to host memory, as an answer needs them;
- attnscope, the alignment only: the cross-attention of the last layer, averaged over its heads
  (CTranslate2's ``return_attention`` output), copied to host memory;
- attnscope without attention;
- CTranslate2 (``compute_type=float16``) without attention, and with ``return_attention``.

Both read the same weights: the Hugging Face folder is imported with ``attnscope import``
(checked against the original on import) and converted with CTranslate2's own
``TransformersConverter``. Random weights stop at random, so each row counts the target tokens
it produced (end of sentence not counted) and the table gives tokens per second and the mean
output length. attnscope decodes through its default path on the device (on CUDA: the
fixed-shape beam search replayed as CUDA graphs, ``ATTNSCOPE_CUDA_GRAPHS``). CTranslate2 is
optional (``pip install ctranslate2``; on a CUDA 13 machine its wheel needs CUDA 12's cuBLAS,
docs/gpu.md): without it the attnscope rows are still timed. Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hf"))

from attnscope.decoding import beam_search  # noqa: E402
from attnscope.hf.importer import import_model  # noqa: E402
from attnscope.repository import load_model_folder  # noqa: E402
from bench.hf_import import opus_shaped_marian  # noqa: E402

WORDS = (
    "a man woman child dog girl boy in on the with is are of and red blue green street water park "
    "playing running sitting standing wearing black white shirt hat ball two three people young old "
    "near small large front next to at while holding looking building grass field beach snow bike"
).split()
Run = Callable[[list[str]], tuple[int, int]]  # sentences -> (target tokens, sentences)


def sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` English-looking sentences of 6 to 24 words (a fixed seed: every row gets the same)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24))) + " ." for _ in range(count)]


def attnscope_run(folder: Path, device: torch.device, mode: str, args: argparse.Namespace) -> Run:
    """attnscope's beam search over batches of ``args.batch``; ``mode`` "all", "alignment" or "none"."""
    loaded = load_model_folder(folder, device)
    model = loaded.model.half() if device.type == "cuda" else loaded.model
    c, tokenizer = model.config, loaded.tokenizer

    def run(texts: list[str]) -> tuple[int, int]:
        produced = 0
        with torch.inference_mode():
            for i in range(0, len(texts), args.batch):
                ids = [tokenizer.encode(t) + [c.eos_id] for t in texts[i : i + args.batch]]
                width = max(map(len, ids))
                src = torch.tensor([s + [c.pad_id] * (width - len(s)) for s in ids], device=device)
                out = beam_search(model, src, beam_size=args.beam, alpha=0.0, max_length=args.max_length,
                                  need_weights=mode != "none")  # fmt: skip
                if mode == "all":
                    for kind in (out.encoder_self, out.decoder_self, out.cross):
                        kind.float().cpu()  # type: ignore[union-attr]
                elif mode == "alignment":
                    out.cross[:, -1].float().mean(1).cpu()  # type: ignore[index]
                lengths, tokens = out.lengths.cpu(), out.tokens.cpu()
                ended = tokens.gather(1, (lengths - 1)[:, None])[:, 0].eq(c.eos_id)
                produced += int((lengths - ended.long()).sum())
        return produced, len(texts)

    return run


def ctranslate2_run(source: Path, out: Path, device: torch.device, attention: bool, args: argparse.Namespace) -> Run | None:
    """CTranslate2 on the same Hugging Face folder, fp16, or None (the reason printed)."""
    try:
        import ctranslate2
        from transformers import MarianTokenizer
    except ImportError as err:
        print(f"CTranslate2 rows skipped: {err}", flush=True)
        return None
    if device.type == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        print("CTranslate2 rows skipped: this ctranslate2 sees no CUDA device", flush=True)
        return None
    target = out / "ct2-marian"
    if not (target / "model.bin").exists():
        ctranslate2.converters.TransformersConverter(str(source)).convert(str(target), quantization="float16", force=True)
    translator = ctranslate2.Translator(str(target), device=device.type, compute_type="float16" if device.type == "cuda" else "float32")
    tokenizer = MarianTokenizer.from_pretrained(str(source))

    def run(texts: list[str]) -> tuple[int, int]:
        tokens = [tokenizer.convert_ids_to_tokens(tokenizer(t).input_ids) for t in texts]
        results = translator.translate_batch(
            tokens, beam_size=args.beam, max_batch_size=args.batch, max_decoding_length=args.max_length,
            return_attention=attention, length_penalty=0.0,
        )  # fmt: skip
        return sum(len(r.hypotheses[0]) for r in results), len(texts)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default="out/marian-ct2.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(1)
    texts = sentences(args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        source = opus_shaped_marian(Path(tmp) / "source")
        imported = import_model(str(source), Path(tmp) / "en-de-opus-shaped", dtype="float16").folder
        print(f"built and imported in {time.perf_counter() - start:.0f} s", flush=True)
        systems: dict[str, Run] = {
            "attnscope, every matrix": attnscope_run(imported, device, "all", args),
            "attnscope, alignment only": attnscope_run(imported, device, "alignment", args),
            "attnscope, no attention": attnscope_run(imported, device, "none", args),
        }
        for attention in (False, True):
            ct2 = ctranslate2_run(source, Path(tmp), device, attention, args)
            if ct2 is not None:
                systems["CTranslate2" + (", return_attention" if attention else ", no attention")] = ct2
        for run in systems.values():  # warm-up: graphs captured, kernels chosen
            run(texts[: args.batch])
        times: dict[str, list[float]] = {name: [] for name in systems}
        counts: dict[str, int] = {}
        for _ in range(args.runs):
            for name, run in systems.items():
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                counts[name], _ = run(texts)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - start)
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"\n{hardware}, {args.sentences} sentences, batch {args.batch}, beam {args.beam}, fp16, max {args.max_length} tokens")
    print("| system | target tokens/s | sentences/s | mean output tokens |")
    print("| --- | ---: | ---: | ---: |")
    rows = {}
    for name in systems:
        seconds = statistics.median(times[name])
        rows[name] = {"tokens_per_s": counts[name] / seconds, "sentences_per_s": args.sentences / seconds,
                      "mean_tokens": counts[name] / args.sentences, "seconds": times[name]}  # fmt: skip
        print(f"| {name} | {rows[name]['tokens_per_s']:.0f} | {rows[name]['sentences_per_s']:.1f} | {rows[name]['mean_tokens']:.1f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"device": hardware, "args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
