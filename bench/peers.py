"""attnscope against the tools users would pick instead, on the same weights and sentences.

    .venv/bin/pip install -e '.[bench]'        # ctranslate2 and transformers (bench only)
    .venv/bin/python bench/peers.py [--model models/en-de-transformer] [--repeats 5]

A shipped Transformer (pre-norm, ReLU, tied embeddings, sinusoidal positions, embeddings scaled by
sqrt(d_model)) is converted to CTranslate2 (``TransformerSpec``, fused QKV, our own position table)
and loaded into Hugging Face's M2M100 classes (the pre-norm encoder-decoder with sinusoidal
positions; its position table is overwritten with ours). Before timing, each peer's greedy output
is compared with attnscope's on the same sentences: a wrong conversion stops the run.

Then all systems are timed in one interleaved run (1 thread each, the same sentences: by default
the first 32 of test2016, or ``--split``/``--skip``/``--min-words`` for others, e.g. long ones;
greedy and beam 5, batch 1 and batch 32), median of ``--repeats`` runs after a warm-up, in ms per
sentence, with the ratio to CT2 fp32 (int8 systems: to CT2 int8). The times are CPU time of the
process (every system runs on one thread): on a shared machine wall-clock time also counts the
time other processes held the core; both are kept in the JSON written under ``--out``.
What each returns:

- attnscope: every attention matrix (encoder self, decoder self, cross; all layers and heads);
  ``attnscope-noattn`` asks for none (the fused SDPA kernel); ``attnscope-int8``: all matrices,
  int8 linear layers (``ATTNSCOPE_QUANTIZE=int8``: FBGEMM's int8 products, the native step of
  attnscope/nn/native); ``attnscope-int8-py``: the same through the Python step (``ATTNSCOPE_NATIVE=0``).
- HF transformers: ``output_attentions=True`` (every matrix, eager attention).
- CTranslate2: ``return_attention=True`` (one matrix per sentence: the last layer's cross-attention
  averaged over heads), fp32 and int8.

Beam search ranks with each tool's own length normalisation (ours GNMT ``((5+|y|)/6)^0.6``, the
peers ``|y|^0.6``), so a few beam outputs may differ; the agreement is printed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from attnscope.allocator import keep_freed_memory  # noqa: E402
from attnscope.decoding import beam_search, greedy_decode  # noqa: E402
from attnscope.decoding.output import max_target_length  # noqa: E402
from attnscope.nn.transformer import Transformer, sinusoidal_positions  # noqa: E402
from attnscope.repository import LoadedModel, load_model_folder  # noqa: E402
from attnscope.training.data import SPLITS  # noqa: E402

Run = Callable[[list[list[int]], int], list[list[int]]]  # (sources with EOS, beam) -> outputs
ALPHA = 0.6


def budget(sources: list[list[int]]) -> int:
    """The decoding budget attnscope uses (1.5 x longest source + 10), given to every system."""
    return max_target_length(torch.tensor([len(s) for s in sources]), 1.5, 10, None)


def padded(sources: list[list[int]], pad: int) -> torch.Tensor:
    width = max(len(s) for s in sources)
    return torch.tensor([s + [pad] * (width - len(s)) for s in sources])


def strip(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos)] if eos in ids else ids


# --- attnscope --------------------------------------------------------------------------------


def attnscope_runner(model: Transformer, need_weights: bool) -> Run:
    c = model.config

    def run(sources: list[list[int]], beam: int) -> list[list[int]]:
        src = padded(sources, c.pad_id).to(model.device)
        kw: dict[str, Any] = dict(need_weights=need_weights, max_length=budget(sources))
        if beam == 1:
            out = greedy_decode(model, src, **kw)
        else:
            out = beam_search(model, src, beam_size=beam, alpha=ALPHA, **kw)
        return [strip(h.tokens, c.eos_id) for h in out.hypotheses()]

    return run


def with_env(run: Run, name: str, value: str) -> Run:
    """``run`` with the environment variable ``name`` set to ``value`` around each call."""

    def wrapped(sources: list[list[int]], beam: int) -> list[list[int]]:
        before = os.environ.get(name)
        os.environ[name] = value
        try:
            return run(sources, beam)
        finally:
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before

    return wrapped


def python_step(run: Run) -> Run:
    """``run`` with the native int8 step switched off (ATTNSCOPE_NATIVE=0 while it runs): the
    int8 products through the Python step, to measure what the native step wins."""
    return with_env(run, "ATTNSCOPE_NATIVE", "0")


# --- CTranslate2 ------------------------------------------------------------------------------


def to_ctranslate2(loaded: LoadedModel, out_dir: Path) -> Path:
    """Write the model as a CTranslate2 TransformerSpec into ``out_dir`` (fp32)."""
    import ctranslate2
    from ctranslate2.specs import common_spec, transformer_spec

    model, c = loaded.model, loaded.config
    w = {k: v.float().numpy() for k, v in model.state_dict().items()}
    spec = transformer_spec.TransformerSpec.from_config(
        (c.encoder_layers, c.decoder_layers),
        c.heads,
        pre_norm=True,
        activation=common_spec.Activation.RELU,
        alignment_heads=c.heads,  # return_attention: the last layer's heads averaged
    )
    spec.config.layer_norm_epsilon = 1e-5  # torch's LayerNorm default

    def norm(s: Any, name: str) -> None:
        s.gamma, s.beta = w[f"{name}.weight"], w[f"{name}.bias"]

    def linear(s: Any, *names: str) -> None:
        s.weight = torch.cat([torch.from_numpy(w[f"{n}.weight"]) for n in names]).numpy()
        s.bias = torch.cat([torch.from_numpy(w[f"{n}.bias"]) for n in names]).numpy()

    table = sinusoidal_positions(c.max_positions, c.d_model).numpy()
    for side in (spec.encoder, spec.decoder):
        for emb in side.embeddings if isinstance(side.embeddings, list) else [side.embeddings]:
            emb.weight = w["embed.weight"]
        side.position_encodings.encodings = table
        side.scale_embeddings = True
    norm(spec.encoder.layer_norm, "encoder_norm")
    norm(spec.decoder.layer_norm, "decoder_norm")
    spec.decoder.projection.weight = w["embed.weight"]  # tied
    for i, layer in enumerate(spec.encoder.layer):
        p = f"encoder_layers.{i}"
        norm(layer.self_attention.layer_norm, f"{p}.res_attn.norm")
        linear(layer.self_attention.linear[0], *(f"{p}.self_attn.{x}_proj" for x in "qkv"))
        linear(layer.self_attention.linear[1], f"{p}.self_attn.out_proj")
        norm(layer.ffn.layer_norm, f"{p}.res_ff.norm")
        linear(layer.ffn.linear_0, f"{p}.ff.net.0")
        linear(layer.ffn.linear_1, f"{p}.ff.net.3")
    for i, layer in enumerate(spec.decoder.layer):
        p = f"decoder_layers.{i}"
        norm(layer.self_attention.layer_norm, f"{p}.res_self.norm")
        linear(layer.self_attention.linear[0], *(f"{p}.self_attn.{x}_proj" for x in "qkv"))
        linear(layer.self_attention.linear[1], f"{p}.self_attn.out_proj")
        norm(layer.attention.layer_norm, f"{p}.res_cross.norm")
        linear(layer.attention.linear[0], f"{p}.cross_attn.q_proj")
        linear(layer.attention.linear[1], f"{p}.cross_attn.k_proj", f"{p}.cross_attn.v_proj")
        linear(layer.attention.linear[2], f"{p}.cross_attn.out_proj")
        norm(layer.ffn.layer_norm, f"{p}.res_ff.norm")
        linear(layer.ffn.linear_0, f"{p}.ff.net.0")
        linear(layer.ffn.linear_1, f"{p}.ff.net.3")
    vocab = [loaded.tokenizer.sp.id_to_piece(i) for i in range(c.vocab_size)]
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.validate()
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    assert ctranslate2.contains_model(str(out_dir))
    return out_dir


def converted(loaded: LoadedModel, model_dir: str, out_dir: Path) -> Path:
    """The CTranslate2 copy of ``model_dir`` under ``out_dir``, converted on first use only."""
    path = out_dir / f"ct2-{Path(model_dir).name}"
    if not (path / "model.bin").exists():
        to_ctranslate2(loaded, path)
    return path


def ctranslate2_runner(loaded: LoadedModel, path: Path, compute_type: str) -> Run:
    import ctranslate2

    translator = ctranslate2.Translator(
        str(path), device="cpu", compute_type=compute_type, intra_threads=1, inter_threads=1
    )
    sp, eos = loaded.tokenizer.sp, loaded.config.eos_id

    def run(sources: list[list[int]], beam: int) -> list[list[int]]:
        tokens = [[sp.id_to_piece(i) for i in s] for s in sources]
        results = translator.translate_batch(
            tokens,
            beam_size=beam,
            length_penalty=ALPHA,
            max_decoding_length=budget(sources),
            return_attention=True,
            max_batch_size=len(sources),
        )
        return [strip([sp.piece_to_id(t) for t in r.hypotheses[0]], eos) for r in results]

    return run


# --- Hugging Face transformers -----------------------------------------------------------------


def to_transformers(loaded: LoadedModel) -> Any:
    """The same weights in M2M100ForConditionalGeneration (pre-norm, sinusoidal positions)."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    c = loaded.config
    config = M2M100Config(
        vocab_size=c.vocab_size,
        d_model=c.d_model,
        encoder_layers=c.encoder_layers,
        decoder_layers=c.decoder_layers,
        encoder_attention_heads=c.heads,
        decoder_attention_heads=c.heads,
        encoder_ffn_dim=c.ff_dim,
        decoder_ffn_dim=c.ff_dim,
        activation_function="relu",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        scale_embedding=True,
        max_position_embeddings=c.max_positions,
        pad_token_id=c.pad_id,
        bos_token_id=c.bos_id,
        eos_token_id=c.eos_id,
        decoder_start_token_id=c.bos_id,
        tie_word_embeddings=True,
        attn_implementation="eager",
    )
    hf = M2M100ForConditionalGeneration(config).eval()
    w = loaded.model.state_dict()
    mine: dict[str, torch.Tensor] = {"model.shared.weight": w["embed.weight"]}
    for side, n in (("encoder", c.encoder_layers), ("decoder", c.decoder_layers)):
        mine[f"model.{side}.embed_tokens.weight"] = w["embed.weight"]
        mine[f"model.{side}.layer_norm.weight"] = w[f"{side}_norm.weight"]
        mine[f"model.{side}.layer_norm.bias"] = w[f"{side}_norm.bias"]
        names = {"self_attn": "self_attn", "fc1": "ff.net.0", "fc2": "ff.net.3", "final_layer_norm": "res_ff.norm"}
        names["self_attn_layer_norm"] = "res_attn.norm" if side == "encoder" else "res_self.norm"
        if side == "decoder":
            names |= {"encoder_attn": "cross_attn", "encoder_attn_layer_norm": "res_cross.norm"}
        for i in range(n):
            for theirs, ours in names.items():
                for key in w:
                    prefix = f"{side}_layers.{i}.{ours}."
                    if key.startswith(prefix):
                        mine[f"model.{side}.layers.{i}.{theirs}.{key[len(prefix):]}"] = w[key]
    missing, unexpected = hf.load_state_dict(mine, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        raise SystemExit(f"HF conversion: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    table = sinusoidal_positions(c.max_positions, c.d_model)
    for side in (hf.model.encoder, hf.model.decoder):
        pos = side.embed_positions
        start = pos.padding_idx + 1  # fairseq numbering: position p is row pad + 1 + p
        pos.weights[start : start + c.max_positions] = table
    return hf


def transformers_runner(loaded: LoadedModel, hf: Any) -> Run:
    c = loaded.config

    @torch.inference_mode()
    def run(sources: list[list[int]], beam: int) -> list[list[int]]:
        src = padded(sources, c.pad_id)
        out = hf.generate(
            input_ids=src,
            attention_mask=src.ne(c.pad_id),
            num_beams=beam,
            do_sample=False,
            max_new_tokens=budget(sources),
            output_attentions=True,
            return_dict_in_generate=True,
            bad_words_ids=[[c.pad_id], [c.bos_id]],
            **({"length_penalty": ALPHA} if beam > 1 else {}),
        )
        return [strip(row[1:].tolist(), c.eos_id) for row in out.sequences]

    return run


# --- the run ------------------------------------------------------------------------------------


def test_sentences(
    loaded: LoadedModel, data_dir: Path, count: int, split: str = "test2016", skip: int = 0, min_words: int = 0
) -> list[list[int]]:
    with gzip.open(data_dir / f"{SPLITS[split]}.{loaded.source_lang}.gz", "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if len(line.split()) >= min_words][skip : skip + count]
    if not lines:
        raise SystemExit(f"{split}: no sentences of {min_words}+ words after skipping {skip}")
    return [loaded.tokenizer.encode(line) + [loaded.config.eos_id] for line in lines]


def decode_all(run: Run, sources: list[list[int]], beam: int, batch: int) -> list[list[int]]:
    out: list[list[int]] = []
    for i in range(0, len(sources), batch):
        out += run(sources[i : i + batch], beam)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/en-de-transformer")
    parser.add_argument("--data-dir", default=os.environ.get("ATTNSCOPE_DATA_DIR", "data/multi30k"))
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--split", choices=[name for name in SPLITS if name != "train"], default="test2016")
    parser.add_argument("--skip", type=int, default=0, help="start after this many sentences of the split")
    parser.add_argument("--min-words", type=int, default=0, help="only sentences of at least this many words")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument(
        "--systems",
        nargs="+",
        default=["attnscope", "attnscope-noattn", "hf", "ct2", "ct2-int8"],
        help="any of attnscope attnscope-noattn attnscope-int8 attnscope-int8-py hf ct2 ct2-int8",
    )
    parser.add_argument("--out", default="out/peers")
    parser.add_argument(
        "--keep-freed-mb", type=int, default=256,
        help="malloc tuning of the whole process, every system alike, as `attnscope serve` does "
        "(attnscope/allocator.py); 0: glibc's defaults",
    )
    args = parser.parse_args()

    torch.set_num_threads(1)
    keep_freed_memory(args.keep_freed_mb)
    loaded = load_model_folder(args.model)
    if not isinstance(loaded.model, Transformer):
        raise SystemExit(f"{args.model}: bench/peers.py compares Transformers only")
    loaded.model.eval()
    sources = test_sentences(loaded, Path(args.data_dir), args.sentences, args.split, args.skip, args.min_words)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    runners: dict[str, Run] = {}
    for name in args.systems:
        if name == "attnscope":
            runners[name] = attnscope_runner(loaded.model, need_weights=True)
        elif name == "attnscope-noattn":
            runners[name] = attnscope_runner(loaded.model, need_weights=False)
        elif name in ("attnscope-int8", "attnscope-int8-py"):
            from attnscope.nn.quantize import quantize

            int8 = attnscope_runner(quantize(load_model_folder(args.model).model, "int8"), need_weights=True)  # type: ignore[arg-type]
            runners[name] = int8 if name == "attnscope-int8" else python_step(int8)
        elif name == "hf":
            runners[name] = transformers_runner(loaded, to_transformers(loaded))
        elif name in ("ct2", "ct2-int8"):
            path = converted(loaded, args.model, out_dir)
            runners[name] = ctranslate2_runner(loaded, path, "int8" if name == "ct2-int8" else "float32")
        else:
            raise SystemExit(f"unknown system {name!r}")

    # agreement with attnscope's own outputs, before any timing
    reference = {beam: decode_all(attnscope_runner(loaded.model, False), sources, beam, 32) for beam in args.beams}
    agreement: dict[str, dict[int, int]] = {}
    for name, run in runners.items():
        agreement[name] = {}
        for beam in args.beams:
            got = decode_all(run, sources, beam, 32)
            agreement[name][beam] = sum(a == b for a, b in zip(got, reference[beam], strict=True))
        print(f"{name:<17} same output as attnscope: " + ", ".join(f"beam {b}: {n}/{len(sources)}" for b, n in agreement[name].items()))
        if name in ("ct2", "hf") and 1 in agreement[name] and agreement[name][1] < 0.9 * len(sources):
            raise SystemExit(f"{name}: greedy output differs from attnscope's: the conversion is wrong")

    settings = [(beam, batch) for beam in args.beams for batch in args.batches]
    times: dict[tuple[str, int, int], list[float]] = {}  # CPU ms per sentence
    walls: dict[tuple[str, int, int], list[float]] = {}  # wall-clock ms per sentence
    for r in range(args.repeats + 1):  # the first round warms up
        for beam, batch in settings:
            names = list(runners)
            names = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
            for name in names:
                wall, cpu = time.perf_counter(), time.process_time()
                decode_all(runners[name], sources, beam, batch)
                per = 1000 / len(sources)
                if r:
                    times.setdefault((name, beam, batch), []).append((time.process_time() - cpu) * per)
                    walls.setdefault((name, beam, batch), []).append((time.perf_counter() - wall) * per)

    medians = {key: statistics.median(v) for key, v in times.items()}
    header = "| setting | " + " | ".join(runners) + " |"
    print(f"\n{args.model}, {len(sources)} {args.split} sentences (from {args.skip}{f', {args.min_words}+ words' if args.min_words else ''}), 1 thread, CPU ms per sentence (median of {args.repeats}); ratio to CT2 of the same precision\n")
    print(header)
    print("|" + " --- |" * (len(runners) + 1))
    for beam, batch in settings:
        cells = []
        for name in runners:
            ms = medians[(name, beam, batch)]
            peer = ("ct2-int8" if "int8" in name else "ct2", beam, batch)
            ratio = f" ({ms / medians[peer]:.2f}x)" if peer in medians and not name.startswith("ct2") else ""
            cells.append(f"{ms:.1f}{ratio}")
        label = f"{'greedy' if beam == 1 else f'beam {beam}'}, batch {batch}"
        print(f"| {label} | " + " | ".join(cells) + " |")
    record = {
        "model": args.model,
        "sentences": len(sources),
        "split": args.split,
        "skip": args.skip,
        "min_words": args.min_words,
        "torch": torch.__version__,
        "keep_freed_mb": args.keep_freed_mb,
        "agreement": agreement,
        "ms_per_sentence": {f"{n} beam{b} batch{s}": v for (n, b, s), v in medians.items()},
        "cpu_ms_runs": {f"{n} beam{b} batch{s}": v for (n, b, s), v in times.items()},
        "wall_ms_runs": {f"{n} beam{b} batch{s}": v for (n, b, s), v in walls.items()},
    }
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out_dir / f"peers-{stamp}.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
