"""The recipe-search table and learning curves, built from run folders (what `attnscope train`
writes: card.json with hyperparameters, curve and test BLEU; tokenizer.model).

    .venv/bin/python scripts/recipe_table.py out/en-de-tf-* out/en-fr-tf-* models/en-*-transformer \
        --curves docs/recipe-search-curves.svg > table.md

One Markdown row per folder, sorted by pair then validation BLEU: the recipe (layers, feed-forward
width, dropout on the residual / attention / activation paths, label smoothing, checkpoint
averaging), size, training length, the validation BLEU the selection used (greedy, lowercased)
and test BLEU (beam 5, lowercased 13a, with the coverage penalty the card decodes with). A folder whose card has a `history` (a shipped model that
replaced another) adds a row per replaced model. ``--curves`` also writes an SVG of validation BLEU
per epoch, one panel per language pair (no plotting library needed)."""

from __future__ import annotations

import argparse
import json
import sys
from html import escape
from pathlib import Path
from typing import Any

SPLITS = ("test2016", "test2017", "mscoco2017")
COLUMNS = (
    "run", "layers", "ff", "dropout res/attn/act", "label smoothing", "checkpoint", "params (M)",
    "epochs", "time (s)", "tokenizer", "val BLEU", "coverage β", *SPLITS,
)  # fmt: skip


def _num(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def read_run(folder: Path) -> list[dict[str, Any]]:
    """The table rows of one run folder: itself, then each model it replaced (card history)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from attnscope.text.tokenizer import Tokenizer  # the repository's, imported only when needed

    card = json.loads((folder / "card.json").read_text())
    model = card.get("hyperparameters", {}).get("model", {})
    train = card.get("hyperparameters", {}).get("training", {})
    facts = card.get("training", {})
    tokenizer = "?"
    if (folder / "tokenizer.model").is_file():
        tokenizer = "byte fallback" if Tokenizer.load(folder / "tokenizer.model").byte_fallback else "NFKC, `<unk>`"
    dropout = model.get("dropout")
    row = {
        "run": f"{folder.name} (shipped)" if folder.parent.name == "models" else folder.name,
        "pair": f"{card.get('source_lang', '?')}-{card.get('target_lang', '?')}",
        "layers": f"{model.get('encoder_layers', '?')}+{model.get('decoder_layers', '?')}",
        "ff": str(model.get("ff_dim", "?")),
        "dropout res/attn/act": "/".join(
            _num(model.get(k) if model.get(k) is not None else dropout)
            for k in ("dropout", "attention_dropout", "activation_dropout")
        ),
        "label smoothing": _num(train.get("label_smoothing"), 1),
        "checkpoint": facts.get("selected", "?"),
        "params (M)": _num(card.get("parameters", 0) / 1e6, 1),
        "epochs": str(facts.get("epochs", "?")),
        "time (s)": _num(facts.get("time_s"), 0),
        "tokenizer": tokenizer,
        "val BLEU": facts.get("best_val_bleu"),
        "coverage β": str((card.get("decoding") or {}).get("coverage_penalty", 0.0)),
        "curve": card.get("curve", []),
        **{s: card.get("bleu", {}).get(s, {}).get("lowercase_13a") for s in SPLITS},
    }
    rows = [row]
    history = card.get("history", [])  # newest first
    dates = [old.get("replaced_on", "?") for old in history]
    for index, old in enumerate(history):
        # Two replacements on one day: name them by version (the first model shipped is v1).
        version = f" v{len(history) - index}" if dates.count(dates[index]) > 1 else ""
        rows.append(
            {
                **{c: "" for c in COLUMNS},
                "run": f"{folder.name}{version} until {dates[index]}",
                "note": old.get("architecture", ""),
                "pair": row["pair"],
                "params (M)": _num(old.get("parameters", 0) / 1e6, 1),
                "val BLEU": old.get("best_val_bleu"),
                "curve": [],
                **{s: old.get("bleu", {}).get(s, {}).get("lowercase_13a") for s in SPLITS},
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """One table per language pair, best validation BLEU first."""
    out = []
    for pair in sorted({r["pair"] for r in rows}):
        out += [f"**{pair}**", "", "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        mine = sorted((r for r in rows if r["pair"] == pair), key=lambda r: -(r["val BLEU"] or 0))
        for r in mine:
            cells = [_num(r[c]) if c in ("val BLEU", *SPLITS) else str(r[c]) for c in COLUMNS]
            out.append("| " + " | ".join(cells) + " |")
        out += [f"\n{r['run']}: {r['note']}".replace("<unk>", "`<unk>`") for r in mine if r.get("note")]
        out.append("")
    return "\n".join(out)


PALETTE = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#be185d", "#4b5563")


def curves_svg(rows: list[dict[str, Any]], width: int = 540, height: int = 300) -> str:
    """Validation BLEU per epoch, a panel per language pair side by side, a line per run."""
    pairs = sorted({r["pair"] for r in rows if r["curve"]})
    pad_l, pad_r, pad_t, pad_b = 44, 210, 28, 36
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(pairs)}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width * len(pairs)}" height="{height}" fill="white"/>',
    ]
    for p, pair in enumerate(pairs):
        runs = [r for r in rows if r["pair"] == pair and r["curve"]]
        points = [(c["epoch"], c["val_bleu"]) for r in runs for c in r["curve"] if c.get("val_bleu") is not None]
        x_max = max(e for e, _ in points)
        top = max(b for _, b in points)
        y_max, y_min = 2 * (int(top // 2) + 1), 2 * int((top - 10) // 2)  # the last 10 points: where runs differ
        x0, w, h = p * width + pad_l, width - pad_l - pad_r, height - pad_t - pad_b

        def sx(e: float, x0: float = x0, w: float = w, x_max: float = x_max) -> float:
            return x0 + w * e / x_max

        def sy(b: float, h: float = h, lo: float = y_min, hi: float = y_max) -> float:
            return pad_t + h * (1 - (max(b, lo) - lo) / (hi - lo))  # earlier epochs sit on the floor

        parts.append(f'<text x="{x0}" y="16" font-weight="bold">{escape(pair)}: validation BLEU (greedy, lc) per epoch</text>')
        for tick in range(y_min, y_max + 1, 2):
            parts.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{sy(tick):.1f}" y2="{sy(tick):.1f}" stroke="#e5e7eb"/>')
            parts.append(f'<text x="{x0 - 6}" y="{sy(tick) + 4:.1f}" text-anchor="end">{tick}</text>')
        for tick in range(0, x_max + 1, 10):
            parts.append(f'<text x="{sx(tick):.1f}" y="{pad_t + h + 14}" text-anchor="middle">{tick}</text>')
        parts.append(f'<text x="{x0 + w / 2}" y="{height - 6}" text-anchor="middle">epoch (BLEU below {y_min} drawn at {y_min})</text>')
        for i, r in enumerate(runs):
            color = PALETTE[i % len(PALETTE)]
            line = " ".join(
                f"{sx(c['epoch']):.1f},{sy(c['val_bleu']):.1f}" for c in r["curve"] if c.get("val_bleu") is not None
            )
            parts.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.5"/>')
            label = f"{r['run']} ({_num(r['val BLEU'])})"
            parts.append(f'<text x="{x0 + w + 8}" y="{pad_t + 14 * i + 8}" fill="{color}">{escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run or model folders (each with card.json)")
    parser.add_argument("--curves", type=Path, help="also write the learning curves to this SVG file")
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.folders if not (f / "card.json").is_file()]
    if missing:
        parser.error(f"no card.json in {', '.join(missing)}")
    rows = [row for folder in args.folders for row in read_run(folder)]
    sys.stdout.write(markdown(rows))
    if args.curves:
        args.curves.write_text(curves_svg(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
