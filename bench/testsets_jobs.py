"""Test-set job throughput and the best head on the RWTH gold set (docs/testsets.md).

    python bench/testsets_jobs.py [--model models/en-de-transformer] [--set test2016] [--ray]

Runs one job as the server does (:class:`attnscope.engine.testsets.TestSetJobs`, one torch
thread, greedy, batches of 16; ``--ray``: one local Ray actor with one thread) and prints the time,
sentences a second, corpus BLEU/chrF and, on ``rwth-de-en``, the head chosen on the held-out part
with its AER on the other sentences. Timings include loading the model on Ray (one actor per
tenth of the set) and, in-process, nothing but the job.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from attnscope.config import Settings
from attnscope.engine import testset_data as data
from attnscope.engine.testset_report import corpus_metrics
from attnscope.engine.testsets import TestSetJobs, with_best_head
from attnscope.repository import load_model_folder
from attnscope.translator import Translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="models/en-de-transformer")
    parser.add_argument("--set", default="test2016", help="a Multi30k split or rwth-de-en")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--ray", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = load_model_folder(args.model, torch.device("cpu"))
    settings = Settings()
    if args.set == data.GOLD_SET:
        test_set = data.rwth(
            data.gold_folder(settings.gold_dir, settings.data_dir),
            loaded.source_lang,
            loaded.target_lang,
        )
    else:
        test_set = data.split(settings.data_dir, args.set, loaded.source_lang, loaded.target_lang)
    test_set = test_set.limited(args.limit)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = TestSetJobs(Path(tmp), ray="local" if args.ray else None)
        begun = time.perf_counter()
        job = jobs.start(Translator(loaded), test_set)
        while job.state in ("running", "cancelling"):
            time.sleep(0.1)
        seconds = time.perf_counter() - begun
        if job.state != "done":
            raise SystemExit(f"job {job.state}: {job.error}")
        raw = jobs.rows(job)
        _, best = with_best_head(raw, job)
        flat = None if best is None else best["layer"] * job.info["heads"] + best["head"]
        summary = corpus_metrics(raw, flat)
    report = {
        "model": loaded.id, "set": args.set, "sentences": len(raw), "ray": args.ray, "seconds": round(seconds, 1),
        "sentences_per_s": round(len(raw) / seconds, 1), **summary,
        "best_head": None if best is None else {k: best[k] for k in ("layer", "head", "heldout_aer", "aer", "precision", "recall")},
        "flags": {f: sum(f in r["flags"] for r in raw) for f in ("low_confidence", "never_attended", "short_output")},
    }  # fmt: skip
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
