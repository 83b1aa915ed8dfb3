"""One sentence through an imported 6+6-layer, 512-wide Marian (opus-mt-en-de's shape, random
weights, its 58,101-token vocabulary) against a shipped Transformer: the import itself (time,
folder size) and the median time of ``Translator.translate`` on one sentence, greedy and beam 5,
every attention matrix returned. Both decode a fixed number of tokens (``--tokens``; random
weights never stop on their own), so the times compare the cost per output token.

    .venv/bin/python bench/hf_import.py [--shipped en-de-transformer] [--tokens 20] [--runs 7] [--device cuda]

Needs the extra attnscope[hf]. Torch runs on one thread, as the server does by default; on a GPU
(``--device cuda``) the times are synchronised wall-clock times of the same call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hf"))

from attnscope.config import REPO_ROOT  # noqa: E402
from attnscope.hf.importer import import_model  # noqa: E402
from attnscope.repository import load_model_folder  # noqa: E402
from attnscope.translator import Translator  # noqa: E402

SENTENCE = "A man in a blue shirt is standing on a ladder cleaning windows."


def opus_shaped_marian(folder: Path) -> Path:
    """A random Marian of opus-mt-en-de's shape, with a tokenizer trained on the tiny corpus and
    its vocabulary padded to 58,101 entries."""
    from builders import train_sentencepiece
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    pieces = train_sentencepiece(folder / "source.spm")
    (folder / "target.spm").write_bytes((folder / "source.spm").read_bytes())
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    while len(vocab) < 58100:
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"))
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
        max_position_embeddings=512, pad_token_id=len(vocab) - 1, eos_token_id=0,
        decoder_start_token_id=len(vocab) - 1, activation_function="swish", scale_embedding=True,
    )
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def median_ms(translator: Translator, beam_size: int, tokens: int, runs: int) -> tuple[float, int]:
    """The median ms of one sentence and the tokens it produced."""
    out = translator.translate([SENTENCE], beam_size=beam_size, max_length=tokens)  # warm-up
    times = []
    for _ in range(runs):
        _sync()
        start = time.perf_counter()
        translator.translate([SENTENCE], beam_size=beam_size, max_length=tokens)
        _sync()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), len(out[0].hypothesis.tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shipped", default="en-de-transformer")
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--shipped-dir", default=str(REPO_ROOT / "models"), help="the folder holding --shipped")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a machine with a GPU")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        source = opus_shaped_marian(Path(tmp) / "source")
        start = time.perf_counter()
        done = import_model(str(source), Path(tmp) / "en-de-opus-shaped", dtype="float16")
        import_s = time.perf_counter() - start
        size_mb = sum(f.stat().st_size for f in done.folder.iterdir()) / 1e6
        imported = Translator(load_model_folder(done.folder, args.device))
        shipped = Translator(load_model_folder(Path(args.shipped_dir) / args.shipped, args.device))
        print(f"device: {args.device}")  # noqa: T201
        print(f"import: {import_s:.1f} s, folder {size_mb:.0f} MB, {done.card['parameters'] / 1e6:.1f} M parameters")  # noqa: T201
        print(f"checks: {json.dumps(done.card['conversion_checks'])}")  # noqa: T201
        for beam in (1, 5):
            ours, n_ours = median_ms(imported, beam, args.tokens, args.runs)
            theirs, n_theirs = median_ms(shipped, beam, args.tokens, args.runs)
            print(  # noqa: T201
                f"beam {beam}: imported 6+6x512 {ours:.0f} ms for {n_ours} tokens ({ours / n_ours:.1f} ms/token), "
                f"shipped {args.shipped} {theirs:.0f} ms for {n_theirs} ({theirs / n_theirs:.1f} ms/token)"
            )


if __name__ == "__main__":
    main()
