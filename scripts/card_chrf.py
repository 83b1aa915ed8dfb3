"""chrF for model cards that have BLEU but no chrF, without touching their BLEU.

    ATTNSCOPE_DATA_DIR=... .venv/bin/python scripts/card_chrf.py run models/en-de-rnn-dot ... --out chrf/
    .venv/bin/python scripts/card_chrf.py write chrf/ [--models-dir models]

``run`` translates every split the card has BLEU for with exactly the card's decoding (its
``beam_size``, and the length and coverage penalties the Translator reads from the card, as
``attnscope evaluate`` does), on the CPU with one torch thread, and saves per model the BLEU of
these translations (both conventions), their chrF (sacreBLEU ``CHRF()``: chrF2, character
6-grams, cased) and the translations themselves. ``write`` adds ``chrf`` to each card, keyed by
split as ``evaluate`` writes it, plus ``chrf_run`` saying how it was measured (and for which
splits: ``evaluate --update-card`` takes a split off it when it writes that split's BLEU and chrF
from one run). The card's BLEU is
never overwritten: where this run's BLEU differs from it (another device's arithmetic can flip a
beam decision), ``chrf[split]["bleu_same_run"]`` records this run's, so both are kept. The card
keeps its key order (``chrf`` goes right after ``bleu``) and is written as ``write_card`` writes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(folders: list[Path], out: Path) -> None:
    import torch

    from attnscope.repository import load_model_folder
    from attnscope.training.data import load_parallel
    from attnscope.training.evaluate import bleu_scores, chrf_scores, translate_corpus
    from attnscope.translator import Translator

    torch.set_num_threads(1)
    data = Path(os.environ["ATTNSCOPE_DATA_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    for folder in folders:
        loaded = load_model_folder(folder, torch.device("cpu"))
        translator = Translator(loaded, max_source_tokens=10_000)  # as `attnscope evaluate` builds it
        beam = int(loaded.card.get("beam_size", 5))
        result: dict[str, Any] = {
            "id": loaded.id, "beam_size": beam, "length_penalty": translator.length_penalty,
            "coverage_penalty": translator.coverage_penalty, "splits": {},
        }  # fmt: skip
        for split in loaded.card["bleu"]:
            started = time.monotonic()
            pairs = load_parallel(data, split, loaded.source_lang, loaded.target_lang)
            sources, references = [s for s, _ in pairs], [t for _, t in pairs]
            hyps = translate_corpus(translator, sources, beam_size=beam, progress=False)
            result["splits"][split] = {
                "bleu": bleu_scores(hyps, references), "chrf": chrf_scores(hyps, references),
                "seconds": round(time.monotonic() - started, 1), "sentences": len(sources),
            }  # fmt: skip
            (out / f"{loaded.id}.{split}.hyp").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        (out / f"{loaded.id}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")


def merged(card: dict[str, Any], result: dict[str, Any], measured_on: str) -> dict[str, Any]:
    """``card`` with ``chrf`` (after ``bleu``) and ``chrf_run`` from one ``run`` result."""
    decoding = (card.get("beam_size", 5), result["beam_size"])
    if decoding[0] != decoding[1]:
        raise ValueError(f"{card['id']}: the card decodes with beam {decoding[0]}, the run used {decoding[1]}")
    chrf: dict[str, Any] = {}
    for split, scores in result["splits"].items():
        entry = dict(scores["chrf"])
        ran = {k: scores["bleu"][k] for k in ("cased", "lowercase_13a")}
        if ran != {k: card["bleu"][split][k] for k in ran}:
            entry["bleu_same_run"] = ran
        chrf[split] = entry
    facts = {
        "what": "chrF of beam translations decoded with the card's own settings; the card's BLEU is kept as it "
                "was measured; where the BLEU of these translations differs, chrf[split].bleu_same_run has it",
        "beam_size": result["beam_size"], "length_penalty": result["length_penalty"],
        "coverage_penalty": result["coverage_penalty"], "device": "CPU, 1 torch thread",
        "measured_on": measured_on, "script": "scripts/card_chrf.py", "splits": list(chrf),
    }  # fmt: skip
    out: dict[str, Any] = {}
    for key, value in card.items():
        if key in ("chrf", "chrf_run"):
            continue
        out[key] = value
        if key == "bleu":
            out["chrf"], out["chrf_run"] = chrf, facts
    return out


def write(results: Path, models_dir: Path) -> None:
    from attnscope.repository import read_card, write_card

    today = datetime.date.today().isoformat()
    for path in sorted(results.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        folder = models_dir / result["id"]
        write_card(folder, merged(read_card(folder)[0], result, today))
        print(folder / "card.json")  # noqa: T201 - the script's output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ran = sub.add_parser("run", help="translate and score each model folder")
    ran.add_argument("folders", nargs="+", type=Path)
    ran.add_argument("--out", type=Path, required=True)
    wrote = sub.add_parser("write", help="add the saved chrF to the cards")
    wrote.add_argument("results", type=Path)
    wrote.add_argument("--models-dir", type=Path, default=Path(__file__).resolve().parents[1] / "models")
    args = parser.parse_args()
    if args.command == "run":
        run(args.folders, args.out)
    else:
        write(args.results, args.models_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
