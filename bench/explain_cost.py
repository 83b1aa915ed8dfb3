"""Cost of each explanation method (attnscope.explain) per sentence on the shipped models: the
median and mean wall time of one method on the first N test2016 sentences, teacher-forced on
their reference translations, one CPU thread. Compare with the plain teacher-forced pass
(``forward``, what /api/align runs anyway).

    .venv/bin/python bench/explain_cost.py [--models-dir models] [--data-dir DIR] [--sentences 20] [--models ID ...]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.config import data_dir as resolve_data_dir  # noqa: E402
from attnscope.explain import applicable, explain  # noqa: E402
from attnscope.repository import load_model_folder  # noqa: E402
from attnscope.translator import Translator  # noqa: E402


def sentences(folder: Path, target: str, count: int) -> list[tuple[str, str]]:
    def lines(lang: str) -> list[str]:
        with gzip.open(folder / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            return [line.strip() for _, line in zip(range(count), f, strict=False)]

    return list(zip(lines("en"), lines(target), strict=True))


def timed(job: object, repeat: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        job()  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000.0 / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default="models")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--models", nargs="*", default=["en-de-transformer", "en-de-rnn-additive"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = resolve_data_dir(args.data_dir)
    for model_id in args.models:
        loaded = load_model_folder(Path(args.models_dir) / model_id)
        translator = Translator(loaded)
        pairs = sentences(data, model_id.split("-")[1], args.sentences)
        ids = [(translator.source_ids(s), translator.target_ids(t) + [loaded.config.eos_id]) for s, t in pairs]
        model = loaded.model
        rows: dict[str, list[float]] = {"forward": []}
        with torch.inference_mode():
            for src, tgt in ids:
                tgt_in = torch.tensor([[loaded.config.bos_id, *tgt[:-1]]])
                rows["forward"].append(timed(lambda: model(torch.tensor([src]), tgt_in, need_weights=True)))  # noqa: B023
                methods = applicable(model)
                for method in methods:
                    rows.setdefault(method, []).append(timed(lambda: explain(model, src, tgt, methods=[method])))  # noqa: B023
                if len(methods) > 1:  # one request asking for all of them shares one trace
                    rows.setdefault("all", []).append(timed(lambda: explain(model, src, tgt, methods=methods)))  # noqa: B023
        mean_s = statistics.mean(len(s) for s, _ in ids)
        mean_t = statistics.mean(len(t) for _, t in ids)
        print(f"{model_id}: {len(ids)} sentences, mean {mean_s:.1f} source / {mean_t:.1f} target tokens (with EOS)")
        for method, times in rows.items():
            print(f"  {method:14s} median {statistics.median(times):7.1f} ms  mean {statistics.mean(times):7.1f} ms")


if __name__ == "__main__":
    main()
