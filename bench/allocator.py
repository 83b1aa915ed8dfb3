"""Page faults of beam search with and without attnscope.allocator's malloc tuning (the measurement
tests/test_allocator.py used to assert; it depends on the machine's state: transparent huge
pages, other processes, glibc's dynamic mmap threshold, so it is a benchmark, not a test).

Each setting decodes in a fresh interpreter: one warm-up decode (the heap grows to its peak),
then ``--decodes`` beam-5 decodes of 12 sentences, one thread; it prints each decode's minor page
faults and their median. Tuned, a decode reuses the freed memory (next to none, now and then a
few hundred); glibc's default maps each large step buffer afresh (thousands, e.g. ~4,500 once
and 633 on another machine state).

    .venv/bin/python bench/allocator.py [--model models/en-de-transformer] [--decodes 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import resource, sys
import torch
from attnscope.allocator import keep_freed_memory
from attnscope.decoding import beam_search
from attnscope.repository import load_model_folder

applied = keep_freed_memory(int(sys.argv[1]))
torch.set_num_threads(1)
loaded = load_model_folder(sys.argv[2])
texts = ["A man in a blue shirt is standing on a ladder.", "Two dogs play in the snow."] * 6
ids = [loaded.tokenizer.encode(t) + [loaded.config.eos_id] for t in texts]
width = max(map(len, ids))
src = torch.tensor([s + [0] * (width - len(s)) for s in ids])
beam_search(loaded.model, src, beam_size=5)  # the first decode grows the heap towards its peak
faults = []
for _ in range(int(sys.argv[3])):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    beam_search(loaded.model, src, beam_size=5)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(applied, *faults)
"""


def faults(keep_mb: int, model: str, decodes: int) -> tuple[bool, list[int]]:
    """(whether the tuning applied, each decode's minor page faults) in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(keep_mb), model, str(decodes)],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout.split()  # fmt: skip
    return out[0] == "True", [int(v) for v in out[1:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO / "models" / "en-de-transformer"))
    parser.add_argument("--decodes", type=int, default=5)
    args = parser.parse_args()
    for label, keep_mb in (("tuned (keep 256 MB)", 256), ("glibc default", 0)):
        applied, counts = faults(keep_mb, args.model, args.decodes)
        print(f"{label:20} applied={applied!s:5} median {statistics.median(counts):>7.0f}  each {counts}")


if __name__ == "__main__":
    main()
