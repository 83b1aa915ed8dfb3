"""Why a supervised head's alignment F1 has a ceiling under the "produces" row convention.

The row that produces target word j is computed before the model has seen j, so the head can only
point at the source of the word the model *expects* next. This splits the test2016 target words by
whether the model's own top-1 prediction at that row is the reference word (its first piece), and
reports how often the head's argmax link is a reference link in each group.

    .venv/bin/python scripts/alignment_by_prediction.py models/en-de-transformer-aligned 2 7 \
        [--data-dir data/multi30k] [--split test2016]

Needs the reference alignments of ``attnscope align-corpus`` (``<data-dir>/alignments``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.alignment.corpus import default_align_dir, load_references  # noqa: E402
from attnscope.alignment.heads import build_word_map, word_attention  # noqa: E402
from attnscope.config import data_dir  # noqa: E402
from attnscope.nn.config import BOS_ID, EOS_ID  # noqa: E402
from attnscope.repository import load_model_folder  # noqa: E402
from attnscope.training.data import load_parallel  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("layer", type=int)
    parser.add_argument("head", type=int)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--split", default="test2016")
    args = parser.parse_args()
    loaded = load_model_folder(args.model, torch.device("cpu"))
    tok, model = loaded.tokenizer, loaded.model.eval()
    corpus = data_dir(args.data_dir)
    pairs = load_parallel(corpus, args.split, loaded.source_lang, loaded.target_lang)
    refs = load_references(default_align_dir(corpus), args.split, loaded.source_lang, loaded.target_lang, len(pairs))
    counts = {True: [0, 0], False: [0, 0]}  # predicted right? -> [words, correct links]
    with torch.no_grad():
        for (source, target), ref in zip(pairs, refs, strict=True):
            s_ids, t_ids = tok.encode(source), tok.encode(target)
            tgt = torch.tensor([t_ids + [EOS_ID]])
            out = model(torch.tensor([s_ids + [EOS_ID]]), torch.cat([torch.tensor([[BOS_ID]]), tgt[:, :-1]], 1), need_weights=True)
            predicted = out.logits[0].argmax(-1)  # (T,)
            words = build_word_map(tok.pieces, source, target, s_ids, t_ids, ref.source_words, ref.target_words)
            best = word_attention(out.cross[0, args.layer, args.head], words).argmax(-1).tolist()
            first: dict[int, int] = {}
            for piece, word in enumerate(words.target):
                first.setdefault(word, piece)
            for word, piece in first.items():
                group = counts[bool(predicted[piece] == tgt[0, piece])]
                group[0] += 1
                group[1] += (best[word], word) in ref.links
    total = sum(n for n, _ in counts.values())
    for right, (n, correct) in counts.items():
        print(f"{loaded.id} L{args.layer}H{args.head}, model's next word {'= reference' if right else '!= reference'}: "  # noqa: T201
              f"{n} words ({n / total:.0%}), head's link correct {correct / max(n, 1):.3f}")


if __name__ == "__main__":
    main()
