"""Calibrate and measure the low-confidence / out-of-domain flag (``attnscope.confidence``).

For each model: translate Multi30k val (in-domain; the threshold is its ``--quantile``), then count
how often the flag fires on test2016 (in-domain, unseen) and on ``bench/data/out_of_domain.en``
(news and technical sentences written for this, not from the corpus). With ``--write`` the
threshold and the rates go into the model card's ``confidence`` section, which the server reads.

    .venv/bin/python bench/confidence.py [--models en-de-transformer ...] [--beam 5] [--write]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from attnscope.config import data_dir as corpus_dir  # noqa: E402
from attnscope.decoding.confidence import DEFAULT_QUANTILE, calibrate, mean_logprob  # noqa: E402
from attnscope.repository import load_model_folder  # noqa: E402
from attnscope.text.corpus import read_lines, split_path  # noqa: E402
from attnscope.translator import Translator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT_OF_DOMAIN = ROOT / "bench" / "data" / "out_of_domain.en"


def scores(translator: Translator, texts: list[str], beam: int, batch: int = 64) -> list[float]:
    """The mean log-probability per output token of each text's translation."""
    found: list[float] = []
    for start in range(0, len(texts), batch):
        for result in translator.translate(texts[start : start + batch], beam_size=beam):
            found.append(mean_logprob([float(x) for x in result.hypothesis.token_logprobs]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["en-de-transformer"])
    parser.add_argument("--models-dir", type=Path, default=ROOT / "models")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--quantile", type=float, default=DEFAULT_QUANTILE)
    parser.add_argument("--write", action="store_true", help="write the card's confidence section")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = corpus_dir(args.data_dir)
    ood = [line for line in OUT_OF_DOMAIN.read_text(encoding="utf-8").splitlines() if line.strip()]
    for name in args.models:
        folder = args.models_dir / name
        translator = Translator(load_model_folder(folder))
        src = translator.loaded.card.get("source_lang", "en")
        val = scores(translator, read_lines(split_path(data, "val", src)), args.beam)
        threshold = calibrate(val, args.quantile)
        test = scores(translator, read_lines(split_path(data, "test2016", src)), args.beam)
        out = scores(translator, ood, args.beam)
        rate = lambda xs, t=threshold: sum(x < t for x in xs) / len(xs)  # noqa: E731
        section = {
            "threshold": round(threshold, 4), "quantile": args.quantile, "beam_size": args.beam,
            "calibrated_on": f"Multi30k val ({len(val)} sentences)",
            "flagged": {"test2016": round(rate(test), 4), "out_of_domain": round(rate(out), 4)},
            "sentences": {"test2016": len(test), "out_of_domain": len(out)},
        }  # fmt: skip
        print(f"{name}: threshold {threshold:.3f}; flagged test2016 {rate(test):.1%} of {len(test)}, "
              f"out-of-domain {rate(out):.1%} of {len(out)}")  # fmt: skip
        if args.write:
            card_path = folder / "card.json"
            card = json.loads(card_path.read_text())
            card["confidence"] = section
            card_path.write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
