"""The "Score functions compared" table of docs/findings.md, from the model cards under ``models/``
(the same rows as the Models page: attnscope/score_table.py). Prints the markdown, or with ``--write``
replaces the part of docs/findings.md between the ``score-table`` markers.

    .venv/bin/python scripts/score_table.py --write docs/findings.md
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.repository import discover, read_card  # noqa: E402
from attnscope.score_table import score_rows  # noqa: E402

BEGIN, END = "<!-- score-table:begin -->", "<!-- score-table:end -->"


def cell(value: float | None, digits: int = 2, delta: float | None = None) -> str:
    if value is None:
        return "–"
    text = f"{value:.{digits}f}"
    return f"{text} ({delta:+.1f})" if delta is not None else text


def markdown(models_dir: Path) -> str:
    rows = score_rows(read_card(folder)[0] for folder in discover(models_dir))
    out = []
    for pair in dict.fromkeys(r["pair"] for r in rows):
        out += [
            f"**{pair.replace('-', '→')}** (test2016, beam 5, lowercased BLEU and cased chrF2 of the same translations; in brackets: the difference to no attention)",
            "",
            "| score | score(s, h_i) | params | BLEU | chrF | BLEU 21+ words | entropy (nats) | training | align F1 | what the numbers show |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in (r for r in rows if r["pair"] == pair):
            floor = r["floor"]
            time = f"{r['train_time_s'] / 60:.0f} min, {r['epochs']} ep." if r["train_time_s"] else "–"
            params = f"{r['score_parameters']:,}" if r["score_parameters"] is not None else "–"
            note = " ⚠ weaker run, see its card" if r["note"] else ""
            out.append(
                f"| `{r['score']}` | {r['formula'] if not floor else '—'} | {params} "
                f"| {cell(r['bleu'], delta=None if floor else r['delta_bleu'])} "
                f"| {cell(r['chrf'], delta=None if floor else r['delta_chrf'])} "
                f"| {cell(r['bleu_long'], delta=None if floor else r['delta_long'])} "
                f"| {cell(r['entropy'])} | {time} | {cell(r['alignment_f1'])} | {r['reading']}{note} |"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", type=Path, default=Path(__file__).resolve().parents[1] / "models")
    parser.add_argument("--write", type=Path, help="a Markdown file with the score-table markers to update (docs/findings.md)")
    args = parser.parse_args()
    table = markdown(args.models_dir)
    if not args.write:
        print(table)  # noqa: T201 - the script's output
        return 0
    text = args.write.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{args.write} has no {BEGIN} ... {END} markers")
    args.write.write_text(re.sub(f"{re.escape(BEGIN)}.*?{re.escape(END)}", f"{BEGIN}\n{table}{END}", text, flags=re.S))
    return 0


if __name__ == "__main__":
    sys.exit(main())
