"""The issue's worst request, in-process: one 199-token digit string, beam 16, ``max_length`` 512,
on the shipped en-de Transformer with every attention kind. Reports the decode's wall time and the
process's peak resident memory above what loading the model took (``ru_maxrss``).

    .venv/bin/python bench/worst_case.py [--model models/en-de-transformer] [--beam 16]
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

from attnscope.config import REPO_ROOT
from attnscope.repository import load_model_folder
from attnscope.translator import Translator


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def digit_text(translator: Translator, tokens: int) -> str:
    """A string of digits that the model's tokenizer splits into exactly ``tokens`` pieces."""
    digits = "".join(str(i % 10) for i in range(7 * tokens))
    for n in range(1, len(digits)):
        text = " ".join(digits[:n])
        if len(translator.loaded.tokenizer.encode(text)) >= tokens:
            return text
    raise RuntimeError("cannot build the digit string")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "en-de-transformer"))
    parser.add_argument("--tokens", type=int, default=199)
    parser.add_argument("--beam", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    translator = Translator(load_model_folder(args.model), max_source_tokens=10_000)
    text = digit_text(translator, args.tokens)
    baseline = peak_rss_mb()
    started = time.perf_counter()
    (out,) = translator.translate([text], beam_size=args.beam, max_length=args.max_length)
    elapsed = time.perf_counter() - started
    print(
        f"source tokens {len(out.source_ids) - 1}, output tokens {len(out.target_ids)}, beam {args.beam}, "
        f"max_length {args.max_length}: {elapsed:.1f} s, peak RSS {peak_rss_mb():.0f} MB "
        f"(+{peak_rss_mb() - baseline:.0f} MB over the loaded model)"
    )


if __name__ == "__main__":
    main()
