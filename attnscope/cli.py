"""The ``attnscope`` command: train, evaluate, download the corpus, serve."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnscope.nn.config import ModelConfig
    from attnscope.repository import LoadedModel
    from attnscope.training.presets import TrainConfig
    from attnscope.translator import Translator

from attnscope.alignment.rows import ROWS
from attnscope.allocator import keep_freed_memory
from attnscope.config import IN_CHECKOUT, REPO_ROOT, data_dir
from attnscope.extras import OptionalEngineError


def _pair(text: str) -> tuple[str, str]:
    parts = text.split("-")
    if len(parts) != 2 or not all(parts):
        raise argparse.ArgumentTypeError(f"language pair must look like en-de, got {text!r}")
    return parts[0], parts[1]


Subparsers = argparse._SubParsersAction  # what add_subparsers returns; each _add_* adds one command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnscope", description="Neural MT models and their attention.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_serve, _add_build_native, _add_train, _add_evaluate, _add_align_corpus, _add_distill,
                _add_download, _add_tokenizer, _add_import):  # fmt: skip
        add(sub)
    from attnscope.vision.cli import add_commands as add_vision_commands

    add_vision_commands(sub)
    from attnscope.analysis.cli import add_command as add_analyze_command

    add_analyze_command(sub)
    from attnscope.seal import add_command as add_seal_command

    add_seal_command(sub)
    return parser


def _add_serve(sub: Subparsers) -> None:
    serve = sub.add_parser("serve", help="serve the models over HTTP (API and pages)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--models-dir", default=None,
                       help="a folder of models served beside the shipped ones (an id in both is an error)")
    serve.add_argument("--only-models-dir", action="store_true",
                       help="serve only --models-dir's models, not the shipped ones")
    serve.add_argument("--device", default=None, help="cpu, cuda, cuda:0 ... (default: cuda if available)")
    serve.add_argument("--quantize", choices=["int8"], default=None,
                       help="int8: linear layers dynamically quantised (CPU only; default ATTNSCOPE_QUANTIZE or fp32)")
    serve.add_argument("--workers", type=int, default=None,
                       help="server processes on one port, each with every model (default 1)")
    serve.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="deploy on Ray Serve: on the cluster at ADDRESS (auto, ray://...), else a local Ray "
                            "(needs attnscope[ray]; docs/ray.md)")
    serve.add_argument("--min-replicas", type=int, default=None, help="--ray: fewest replicas (default 1)")
    serve.add_argument("--max-replicas", type=int, default=None, help="--ray: most replicas, autoscaled (default 1)")
    serve.add_argument("--replica-gpus", type=float, default=None, help="--ray: GPUs per replica (default 0)")
    serve.add_argument("--max-loaded-models", type=int, default=None,
                       help="models kept loaded at once, others loaded on first use (default: all)")


def _add_build_native(sub: Subparsers) -> None:
    native = sub.add_parser("build-native", help="build and check the native decoder operations (make install does)")
    native.add_argument("--force", action="store_true", help="rebuild even if a valid build is there")


def _add_train(sub: Subparsers) -> None:
    from attnscope.nn.config import SCORES
    from attnscope.training.presets import PRESETS

    train = sub.add_parser("train", help="train a model on Multi30k and write a model folder")
    train.add_argument("--preset", choices=sorted(PRESETS), default=None,
                       help="model shape and recipe (with --init-from: the recipe only; default transformer)")
    train.add_argument("--init-from", default=None, metavar="FOLDER",
                       help="fine-tune a model folder: its config, tokenizer and weights start the run")
    train.add_argument("--pair", type=_pair, default=None,
                       help="e.g. en-de or en-fr (default en-de, or the --init-from folder's pair)")
    train.add_argument("--out", required=True, help="model folder to write (e.g. models/en-de-transformer)")
    train.add_argument("--score", choices=SCORES, help="alignment score function (RNN models)")
    train.add_argument("--data-dir", default=None, help="Multi30k task 1 raw files")
    train.add_argument("--run-dir", default=None, help="checkpoints for --resume (default runs/<out name>)")
    train.add_argument("--resume", action="store_true", help="continue from the run dir's checkpoint")
    train.add_argument("--tokenizer", default=None, help="reuse a SentencePiece model instead of training one")
    train.add_argument("--device", default=None)
    train.add_argument("--epochs", type=int, dest="max_epochs")
    train.add_argument("--max-steps", type=int)
    train.add_argument("--max-time", type=float, dest="max_time_s", help="training budget in seconds")
    train.add_argument("--batch-tokens", type=int)
    train.add_argument("--lr", type=float)
    train.add_argument("--warmup-steps", type=int)
    train.add_argument("--align-head", default=None, metavar="L,H|auto",
                       help="supervise cross-attention head H of decoder layer L with reference alignments "
                            "(auto: the --init-from model's best-aligned head on val)")
    train.add_argument("--align-weight", type=float, default=1.0, help="weight of the alignment loss term")
    train.add_argument("--align-rows", choices=ROWS, default="produces",
                       help="which step's attention row is trained to align a target word: the step that "
                            "produces it, or the next one, which reads it (Shift-Att; see docs/api.md)")
    train.add_argument("--align-only-head", action="store_true",
                       help="train only the supervised head's query and key projections, every other weight "
                            "frozen (with --init-from: the model keeps translating as before, one head learns to align)")
    train.add_argument("--align-dir", default=None,
                       help="reference alignments from align-corpus, for --align-head and copy_augment "
                            "(default <data-dir>/alignments)")
    train.add_argument("--vocab-size", type=int)
    train.add_argument("--seed", type=int)
    train.add_argument("--no-test-eval", action="store_true", help="skip the test-set evaluation")
    train.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a model config or training recipe field, e.g. --set hidden_dim=512 "
                            "or --set label_smoothing=0.2")
    train.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_evaluate(sub: Subparsers) -> None:
    ev = sub.add_parser("evaluate", help="BLEU of a model folder on the test sets")
    ev.add_argument("model", help="a model folder, or a model's id (en-de-transformer: the shipped one)")
    ev.add_argument("--data-dir", default=None)
    ev.add_argument("--splits", nargs="+", default=None)
    ev.add_argument("--beam", type=int, default=5)
    ev.add_argument("--device", default=None)
    ev.add_argument("--quantize", choices=["int8"], default=None,
                    help="int8: evaluate with the linear layers dynamically quantised (int8 products; CPU only)")
    ev.add_argument("--update-card", action="store_true", help="write the results into card.json")
    ev.add_argument("--alignment", action="store_true",
                    help="instead of BLEU: every cross-attention head's word-alignment F1/AER against the "
                         "reference links of --alignment-split (card key 'alignment')")
    ev.add_argument("--alignment-split", default="test2016")
    ev.add_argument("--links", default=None, metavar="FILE",
                    help="with --alignment: score against this hand-written links file "
                         "(source<TAB>target<TAB>Pharaoh links, whitespace words) instead of the split's "
                         "align-corpus references")
    ev.add_argument("--alignment-rows", choices=ROWS, default="produces",
                    help="score each target word by the row of the step that produces it (card key "
                         "'alignment') or of the step that reads it (card key 'alignment_reads')")
    ev.add_argument("--alignment-gold", default=None, metavar="NAME_OR_DIR",
                    help="instead of BLEU: AER/precision/recall of every head, layer average and explanation "
                         "method against human sure/possible links (rwth-de-en, looked up beside --data-dir, "
                         "or a folder), at both reading steps (card key 'alignment_gold')")
    ev.add_argument("--gold-sentences", type=int, default=None, help="with --alignment-gold: only the first N pairs")
    ev.add_argument("--gold-weights-only", action="store_true",
                    help="with --alignment-gold: score the raw weights only, not the explanation methods")
    ev.add_argument("--gold-eflomal", action="store_true",
                    help="with --alignment-gold: add the eflomal baseline, trained on the corpus' train split "
                         "plus the gold sentences")
    ev.add_argument("--explain", action="store_true",
                    help="instead of BLEU: every explanation method (and the raw weights) per head/layer, scored by "
                         "alignment F1 on --alignment-split and rank correlation with integrated gradients "
                         "(card key 'explanations')")
    ev.add_argument("--explain-sentences", type=int, default=None, help="with --explain: only the first N pairs")
    ev.add_argument("--ig-steps", type=int, default=16, help="with --explain: integrated gradients' intervals")
    ev.add_argument("--ablate", action="store_true",
                    help="instead of BLEU on every split: BLEU of --ablate-split with each attention head "
                         "switched off in turn (card key 'ablation')")
    ev.add_argument("--ablate-split", default="test2016")
    ev.add_argument("--ablate-kinds", nargs="+", default=None, choices=("cross", "encoder_self", "decoder_self"),
                    help="attention kinds whose heads are switched off (default: all the model has)")
    ev.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="with --ablate: translate each head's ablation on Ray Data actors, a local Ray "
                         "without ADDRESS, else that cluster (needs attnscope[ray])")
    ev.add_argument("--actors", type=int, default=1, help="with --ray: model-holding actors (default 1)")
    ev.add_argument("--threads", type=int, default=1, help="with --ray: torch threads per actor (default 1)")
    ev.add_argument("--copies", action="store_true",
                    help="instead of BLEU: put numbers, names and emoji into --copies-split's sentences and "
                         "count how many the translations carry over verbatim (card key 'copies'; needs the "
                         "split's alignments from align-corpus)")
    ev.add_argument("--copies-split", default="test2016")
    ev.add_argument("--protect", action="store_true",
                    help="with --copies: translate through placeholders, as the API's protect option does "
                         "(card key 'copies_protected')")
    ev.add_argument("--attention-only", action="store_true",
                    help="instead of BLEU: only the mean cross-attention entropy (teacher-forced: seconds, "
                         "no beam search; card key 'attention_entropy')")
    ev.add_argument("--align-dir", default=None, help="reference alignments (default <data-dir>/alignments)")
    ev.add_argument("--tune-length-penalty", action="store_true",
                    help="first pick the beam length penalty on the validation set (saved with --update-card)")
    ev.add_argument("--tune-coverage-penalty", action="store_true",
                    help="first pick GNMT's coverage penalty on the validation set (after the length penalty, "
                         "if tuned too; saved with --update-card), and report test BLEU with and without it")


def _add_align_corpus(sub: Subparsers) -> None:
    al = sub.add_parser("align-corpus", help="reference word alignments (eflomal, grow-diag-final-and)")
    al.add_argument("--pair", type=_pair, default=("en", "de"), help="e.g. en-de or en-fr")
    al.add_argument("--data-dir", default=None)
    al.add_argument("--split", nargs="+", default=["val", "test2016"], dest="splits",
                    help="splits aligned (and written) besides train")
    al.add_argument("--out-dir", default=None, help="where the references go (default <data-dir>/alignments)")


def _add_distill(sub: Subparsers) -> None:
    di = sub.add_parser("distill", help="a teacher model's translations of a split, for sequence-level distillation")
    di.add_argument("model", help="the teacher's model folder, or its id")
    di.add_argument("--out", required=True, help="file of source<TAB>translation lines (.gz to compress)")
    di.add_argument("--split", default="train")
    di.add_argument("--data-dir", default=None)
    di.add_argument("--beam", type=int, default=5)
    di.add_argument("--batch-size", type=int, default=128)
    di.add_argument("--device", default=None)


def _add_download(sub: Subparsers) -> None:
    dl = sub.add_parser("download", help="fetch Multi30k task 1 (en, de, fr) from its public repository")
    dl.add_argument("--data-dir", default=None)


def _add_tokenizer(sub: Subparsers) -> None:
    tok = sub.add_parser("tokenizer", help="train a joint SentencePiece model for a pair")
    tok.add_argument("--pair", type=_pair, default=("en", "de"))
    tok.add_argument("--vocab-size", type=int, default=8000)
    tok.add_argument("--data-dir", default=None)
    tok.add_argument("--out", required=True)
    tok.add_argument("--byte-fallback", action="store_true",
                     help="byte pieces instead of <unk>, digits split, no normalisation (lossless)")


def _add_import(sub: Subparsers) -> None:
    imp = sub.add_parser("import", help="import a Hugging Face encoder-decoder or decoder-only LLM as a model folder (extra: attnscope[hf])")
    imp.add_argument("source", help="a folder saved with save_pretrained, or a hub id (e.g. Helsinki-NLP/opus-mt-en-de)")
    imp.add_argument("--out", required=True, help="model folder to write (e.g. models/en-de-opus-mt)")
    imp.add_argument("--name", default=None, help="the name on the model's card (default: the folder's)")
    imp.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], default="float16",
                     help="weights as stored (the checks run in float32 and again on the stored copy)")
    imp.add_argument("--pair", type=_pair, default=None, help="language pair, e.g. en-de (default: from the source)")


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _split_set(item: str) -> tuple[str, str]:
    key, sep, text = item.partition("=")
    if not sep:
        raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
    return key, text


def _set_field(key: str, text: str, architecture: str) -> tuple[str, Any]:
    """``--set KEY=TEXT`` -> ("model" or "train", value of the field's type) for a model of
    ``architecture``; ValueError naming the problem, before any data is read (a wrong type would
    otherwise fail deep inside the model). Model fields are looked up first, then the recipe's."""
    from attnscope.nn.config import CONFIG_CLASSES, config_class
    from attnscope.training.presets import TrainConfig

    model_types = typing.get_type_hints(config_class(architecture))
    train_types = typing.get_type_hints(TrainConfig)
    target, types = ("model", model_types) if key in model_types else ("train", train_types)
    if key not in types:
        others = [a for a, cls in CONFIG_CLASSES.items() if key in typing.get_type_hints(cls)]
        if others:
            raise ValueError(
                f"--set: {key!r} is a field of {' and '.join(others)} models, not of {architecture}; "
                f"a {architecture} model has {', '.join(model_types)}"
            )
        known = ", ".join([*model_types, *train_types])
        raise ValueError(f"--set: unknown model or training field {key!r}; choose one of {known}")
    value = _parse_value(text)
    allowed = tuple(t for t in typing.get_args(types[key]) or (types[key],) if t in (int, float, bool, str))
    allowed = allowed or (str,)
    if float in allowed and type(value) is int:
        value = float(value)
    if value is None and type(None) in typing.get_args(types[key]):
        return target, value
    if type(value) not in allowed:
        names = " or ".join(t.__name__ for t in allowed)
        raise ValueError(f"--set {key} expects {names}, got {text!r}")
    return target, value


def _configs(args: argparse.Namespace) -> tuple[ModelConfig, TrainConfig]:
    """The model config and training recipe of ``train``: the preset, then ``--score``,
    ``--set`` and the recipe flags. ``--set architecture=...`` switches the model family; the
    preset's fields that the chosen architecture lacks are then left out (the tiny preset carries
    small dimensions for every family)."""
    from attnscope.nn.config import config_class, config_fields, config_from_dict, config_to_dict
    from attnscope.training.presets import PRESETS, TrainConfig

    if args.preset is None and args.init_from is None:
        raise ValueError("pass --preset, or --init-from a model folder to fine-tune")
    preset = PRESETS[args.preset or "transformer"]
    sets = [_split_set(item) for item in args.set]
    preset_model: dict[str, Any] = dict(preset["model"])
    if args.init_from:  # fine-tuning: the folder's own model; the preset gives only the recipe
        from attnscope.repository import read_config

        preset_model = config_to_dict(read_config(args.init_from)[0])
    architecture = dict(sets).get("architecture", preset_model["architecture"])
    config_class(architecture)  # an unknown architecture is named before anything else
    fields = config_fields(architecture)
    model_fields: dict[str, Any] = {k: v for k, v in preset_model.items() if k in fields}
    model_fields["architecture"] = architecture
    if args.score:
        if "score" not in fields:
            raise ValueError(f"--score applies to the RNN models; a {architecture} has no alignment score")
        model_fields["score"] = args.score
    train_fields = dict(preset["train"])
    for key, text in sets:
        target, value = _set_field(key, text, architecture)
        (model_fields if target == "model" else train_fields)[key] = value
    for name in ("max_epochs", "max_steps", "max_time_s", "batch_tokens", "lr", "warmup_steps", "vocab_size", "seed"):
        if getattr(args, name) is not None:
            train_fields[name] = getattr(args, name)
    return config_from_dict({"vocab_size": 8000, **model_fields}), TrainConfig(**train_fields)


def cmd_train(args: argparse.Namespace) -> int:
    from attnscope.training.train import TrainRun, train

    model_config, train_config = _configs(args)
    out = Path(args.out)
    corpus = data_dir(args.data_dir)
    tokenizer_path, pair = args.tokenizer, args.pair or ("en", "de")
    if args.init_from:  # fine-tuning keeps the folder's tokenizer and language pair
        from attnscope.repository import TOKENIZER_FILE, read_config

        tokenizer_path = str(Path(args.init_from) / TOKENIZER_FILE)
        meta = read_config(args.init_from)[1]
        folder_pair = (meta["source_lang"], meta["target_lang"])
        if args.pair and tuple(args.pair) != folder_pair:
            raise ValueError(f"--pair {'-'.join(args.pair)} but {args.init_from} is {'-'.join(folder_pair)}")
        pair = folder_pair
    supervision = None
    if args.align_only_head and not args.align_head:
        raise ValueError("--align-only-head goes with --align-head (which head to train)")
    if args.align_head:
        from attnscope.alignment.corpus import default_align_dir
        from attnscope.training.supervision import HeadSupervision

        align_dir = str(args.align_dir or default_align_dir(corpus))
        if args.align_head == "auto":
            if not args.init_from:
                raise ValueError("--align-head auto picks the best-aligned head of the --init-from model")
            from attnscope.alignment.evaluate import best_val_head

            chosen = best_val_head(args.init_from, corpus, align_dir, args.device, rows=args.align_rows)
            logging.getLogger("attnscope").info("supervising head L%dH%d (val F1 %.3f before)", *chosen)
            layer, head = str(chosen[0]), str(chosen[1])
        else:
            layer, sep, head = args.align_head.partition(",")
            if not sep or not layer.strip().isdigit() or not head.strip().isdigit():
                raise ValueError(f"--align-head expects LAYER,HEAD (0-based) or auto, got {args.align_head!r}")
        supervision = HeadSupervision(
            int(layer), int(head), args.align_weight, align_dir, args.align_rows, only_head=args.align_only_head
        )
        supervision.check(model_config)
    run = TrainRun(
        data_dir=corpus,
        out_dir=out,
        run_dir=args.run_dir or (REPO_ROOT if IN_CHECKOUT else Path.cwd()) / "runs" / out.name,
        source_lang=pair[0],
        target_lang=pair[1],
        tokenizer_path=tokenizer_path,
        device=args.device,
        resume=args.resume,
        evaluate_test=not args.no_test_eval,
        progress=not args.quiet,
        init_from=args.init_from,
        supervision=supervision,
        align_dir=args.align_dir,
    )
    card = train(model_config, train_config, run)
    scores = {"bleu": card.get("bleu", {}), "chrf": card.get("chrf", {})}
    logging.getLogger("attnscope").info("wrote %s: %s", out, json.dumps(scores, indent=None))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from attnscope.device import resolve_device
    from attnscope.llm.folder import is_llm_folder
    from attnscope.repository import load_model_folder, write_card
    from attnscope.training.data import TEST_SPLITS
    from attnscope.training.evaluate import attention_entropy
    from attnscope.translator import Translator

    if is_llm_folder(args.model):
        return _evaluate_llm(args)
    if args.links is not None:
        raise ValueError("--links scores a decoder-only folder's heads; an encoder-decoder's use align-corpus files")
    loaded = load_model_folder(args.model, resolve_device(args.device), quantize=args.quantize)
    translator = Translator(loaded, max_source_tokens=10_000)
    if args.tune_coverage_penalty and "cross" not in loaded.config.attention_kinds:
        raise ValueError(f"{loaded.id} has no cross-attention: --tune-coverage-penalty needs it")
    corpus = data_dir(args.data_dir)
    if args.ray is not None and not args.ablate:
        raise ValueError("--ray goes with --ablate (the other evaluations run in-process)")
    if args.alignment_gold is not None:
        return _evaluate_gold(args, loaded, corpus)
    if args.alignment:
        return _evaluate_alignment(args, loaded, corpus)
    if args.explain:
        return _evaluate_explain(args, loaded, corpus)
    if args.ablate:
        return _evaluate_ablate(args, loaded, translator, corpus)
    if args.protect and not args.copies:
        raise ValueError("--protect goes with --copies (the BLEU in cards is measured without placeholders)")
    if args.copies:
        from attnscope.training.copies import evaluate_copies

        copies = evaluate_copies(
            translator, corpus, split=args.copies_split, align_dir=args.align_dir, beam_size=args.beam, protect=args.protect
        )
        print(json.dumps(copies, indent=1, ensure_ascii=False))  # noqa: T201 - the command's output
        if args.update_card:
            write_card(loaded.path, {**loaded.card, "copies_protected" if args.protect else "copies": copies})
        return 0
    splits = args.splits or TEST_SPLITS
    if args.attention_only:
        entropy = attention_entropy(translator, corpus, splits=splits)
        print(json.dumps(entropy, indent=2))  # noqa: T201 - the command's output
        if args.update_card:
            merged = {**loaded.card.get("attention_entropy", {}), **entropy["attention_entropy"]}
            write_card(loaded.path, {**loaded.card, **entropy, "attention_entropy": merged})
        return 0
    return _evaluate_bleu(args, loaded, translator, corpus=corpus, splits=splits)


def _evaluate_bleu(
    args: argparse.Namespace, loaded: LoadedModel, translator: Translator, *, corpus: Path, splits: typing.Sequence[str]
) -> int:
    """``evaluate``'s default: BLEU of ``splits`` (after tuning the length/coverage penalties on
    val when asked), printed and, with ``--update-card``, merged into the card."""
    from attnscope.repository import write_card
    from attnscope.training.data import load_parallel
    from attnscope.training.evaluate import (
        coverage_comparison,
        evaluate,
        tune_coverage_penalty,
        tune_length_penalty,
    )

    tuned: dict[str, Any] = {}
    if args.tune_length_penalty or args.tune_coverage_penalty:
        val = load_parallel(corpus, "val", loaded.source_lang, loaded.target_lang)
        if args.tune_length_penalty:
            tuned.update(tune_length_penalty(translator, val, beam_size=args.beam))
        if args.tune_coverage_penalty:
            tuned.update(tune_coverage_penalty(translator, val, beam_size=args.beam))
    result = evaluate(translator, corpus, splits=splits, beam_size=args.beam)
    if tuned:  # a value not tuned this time keeps the one the card had
        result["decoding"] = {**(loaded.card.get("decoding") or {}), **tuned}
    if args.tune_coverage_penalty:
        chosen = translator.coverage_penalty
        translator.coverage_penalty = 0.0
        without = result if chosen == 0.0 else evaluate(translator, corpus, splits=splits, beam_size=args.beam)
        translator.coverage_penalty = chosen
        result["coverage_experiment"] = {
            "what": "beam search with GNMT's coverage penalty (beta picked on val) against beta = 0",
            "val_bleu_lowercase_by_coverage_penalty": tuned["val_bleu_by_coverage_penalty"],
            **coverage_comparison(result, without),
        }
    print(json.dumps(result, indent=2))  # noqa: T201 - the command's output
    if args.update_card:
        card = {**loaded.card, **result}
        decoding_was = (
            loaded.card.get("beam_size"),
            loaded.card.get("length_penalty", result["length_penalty"]),
            loaded.card.get("coverage_penalty", 0.0),
        )
        same_decoding = decoding_was == (args.beam, result["length_penalty"], result["coverage_penalty"])
        if same_decoding:
            for key in ("bleu", "chrf", "bleu_by_length", "attention_entropy"):  # keep the splits not evaluated
                card[key] = {**loaded.card.get(key, {}), **result[key]}
        _retire_chrf_run(card, set(result["chrf"]) if same_decoding else None)
        write_card(loaded.path, card)
    return 0


def _retire_chrf_run(card: dict[str, Any], rewritten: set[str] | None) -> None:
    """``chrf_run`` (scripts/card_chrf.py: chrF added beside an older BLEU) describes only the splits
    this evaluation did not rewrite: the splits in ``rewritten`` come off it, and it goes once none
    is left (``rewritten`` None: the card's BLEU and chrF were replaced whole)."""
    run = card.get("chrf_run")
    if not isinstance(run, dict):
        return
    left = [] if rewritten is None else [s for s in run.get("splits", []) if s not in rewritten]
    if left:
        card["chrf_run"] = {**run, "splits": left}
    else:
        del card["chrf_run"]


def cmd_align_corpus(args: argparse.Namespace) -> int:
    from attnscope.alignment.corpus import align_corpus

    written = align_corpus(data_dir(args.data_dir), *args.pair, splits=args.splits, align_dir=args.out_dir)
    for path in written.values():
        print(path)  # noqa: T201 - the command's output
    return 0


def _evaluate_ablate(args: argparse.Namespace, loaded: Any, translator: Any, data_dir: str | Path) -> int:
    """``evaluate --ablate``: in-process, or with ``--ray`` on Ray actors (attnscope.executor)."""
    from attnscope.executor import Runner
    from attnscope.repository import write_card
    from attnscope.training.ablation import ablation_bleu

    runner = Runner(
        Path(loaded.path), device=args.device, quantize=args.quantize, max_source_tokens=10_000, ray=args.ray,
        actors=args.actors, threads=args.threads if args.ray is not None else None,
    )  # fmt: skip
    ablation = ablation_bleu(
        translator, data_dir, split=args.ablate_split, kinds=args.ablate_kinds, beam_size=args.beam, runner=runner
    )
    print(json.dumps(ablation, indent=1))  # noqa: T201 - the command's output
    if args.update_card:
        write_card(loaded.path, {**loaded.card, "ablation": ablation})
    return 0


def _evaluate_alignment(args: argparse.Namespace, loaded: Any, data_dir: str | Path) -> int:
    from attnscope.alignment.evaluate import evaluate_alignment
    from attnscope.repository import write_card

    rows = args.alignment_rows
    result = evaluate_alignment(loaded, data_dir, split=args.alignment_split, align_dir=args.align_dir, rows=rows)
    print(json.dumps(result, indent=1))  # noqa: T201 - the command's output
    if args.update_card:
        write_card(loaded.path, {**loaded.card, "alignment" if rows == "produces" else "alignment_reads": result})
    return 0


def _evaluate_gold(args: argparse.Namespace, loaded: Any, data_dir: Path) -> int:
    from attnscope.alignment.gold import resolve_gold
    from attnscope.explain.gold import evaluate_gold
    from attnscope.repository import write_card

    folder = resolve_gold(args.alignment_gold, data_dir.parent if (data_dir.parent / args.alignment_gold).is_dir() else data_dir)
    extra = None
    if args.gold_eflomal:
        from attnscope.alignment.words import moses_words
        from attnscope.training.data import load_parallel

        train = load_parallel(data_dir, "train", loaded.source_lang, loaded.target_lang)
        extra = [(moses_words(s, loaded.source_lang), moses_words(t, loaded.target_lang)) for s, t in train]
    result = evaluate_gold(
        loaded, folder, name=args.alignment_gold, sentences=args.gold_sentences,
        methods=not args.gold_weights_only, eflomal_extra=extra,
    )  # fmt: skip
    print(json.dumps(result, indent=1, ensure_ascii=False))  # noqa: T201 - the command's output
    if args.update_card:
        write_card(loaded.path, {**loaded.card, "alignment_gold": result})
    return 0


def _evaluate_llm(args: argparse.Namespace) -> int:
    """``evaluate`` of a decoder-only folder: only ``--alignment`` (attnscope.llm.alignment)."""
    from attnscope.device import resolve_device
    from attnscope.llm.alignment import evaluate_llm_alignment
    from attnscope.llm.folder import load_llm_folder
    from attnscope.llm.translator import LLMTranslator
    from attnscope.repository import write_card

    if not args.alignment:
        raise ValueError(f"{args.model} is a decoder-only model: evaluate takes it with --alignment only")
    loaded = load_llm_folder(args.model, resolve_device(args.device))
    rows = args.alignment_rows
    result = evaluate_llm_alignment(
        LLMTranslator(loaded, max_prompt_tokens=10_000), links=args.links,
        data_dir=data_dir(args.data_dir) if args.links is None else None,
        split=args.alignment_split, align_dir=args.align_dir, rows=rows,
    )  # fmt: skip
    print(json.dumps(result, indent=1))  # noqa: T201 - the command's output
    if args.update_card:
        write_card(loaded.path, {**loaded.card, "alignment" if rows == "produces" else "alignment_reads": result})
    return 0


def _evaluate_explain(args: argparse.Namespace, loaded: Any, data_dir: str | Path) -> int:
    from attnscope.explain.evaluate import evaluate_explanations
    from attnscope.repository import write_card

    result = evaluate_explanations(
        loaded, data_dir, split=args.alignment_split, align_dir=args.align_dir,
        sentences=args.explain_sentences, ig_steps=args.ig_steps,
    )
    print(json.dumps(result, indent=1))  # noqa: T201 - the command's output
    if args.update_card:
        write_card(loaded.path, {**loaded.card, "explanations": result})
    return 0


def cmd_tokenizer(args: argparse.Namespace) -> int:
    from attnscope.text.tokenizer import Tokenizer
    from attnscope.training.data import load_parallel

    pairs = load_parallel(data_dir(args.data_dir), "train", *args.pair)
    sentences = [s for p in pairs for s in p]
    Tokenizer.train(sentences, args.vocab_size, byte_fallback=args.byte_fallback).save(args.out)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from attnscope.serving.server import run

    if args.only_models_dir and args.models_dir is None:
        raise ValueError("--only-models-dir needs --models-dir DIR")
    if args.models_dir is not None and not Path(args.models_dir).expanduser().is_dir():
        raise FileNotFoundError(f"--models-dir {args.models_dir}: no such folder")
    mine = {"models_dir": args.models_dir} if args.only_models_dir else {"added_models_dir": args.models_dir}
    flags = {"host": args.host, "port": args.port, **mine, "device": args.device,
             "quantize": args.quantize, "max_loaded_models": args.max_loaded_models}
    if args.ray is None:
        run(workers=args.workers, **flags)
        return 0
    from attnscope.serving.ray_serve import run as run_on_ray

    extra = {"ray_min_replicas": args.min_replicas, "ray_max_replicas": args.max_replicas,
             "ray_replica_gpus": args.replica_gpus}
    run_on_ray(args.ray or None, **{k: v for k, v in {**flags, **extra}.items() if v is not None})
    return 0


MODEL_COMMANDS = ("evaluate", "distill", "analyze", "vision-evaluate")  # their `model` is a folder or an id


def _model_folder(value: str) -> str:
    """A command's ``model`` argument: a folder as given, else (as ``attnscope.load`` takes it)
    the id of a model in the model repository (``ATTNSCOPE_MODELS_DIR``, default the shipped
    models: ``evaluate en-de-transformer`` is ``evaluate models/en-de-transformer`` in a
    checkout); unchanged when it is neither (the command's own error says so, :func:`_model_error`)."""
    given = Path(value).expanduser()
    if given.exists() or len(given.parts) > 1:
        return value
    from attnscope.config import Settings

    folder = Settings().models_dir / value
    return str(folder) if folder.is_dir() else value


def _model_error(value: str, err: BaseException) -> str | None:
    """What to say instead of ``err`` when it is a missing file of a ``model`` argument that does
    not exist: no such folder, or (a bare name) no such id either, with the ids there are."""
    given = Path(value).expanduser()
    if given.exists() or not isinstance(err, FileNotFoundError) or not str(err).startswith(f"{value}:"):
        return None
    if len(given.parts) > 1:
        return f"{value}: no such model folder"
    from attnscope.config import Settings

    root = Settings().models_dir
    ids = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []
    return f"{value!r} is neither a model folder nor a model id in {root} (its ids: {', '.join(ids) or 'none'})"


def _one_line(err: BaseException) -> str:
    """An error's message on one line (a library's own message may span several)."""
    return " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # one line naming the commands, not argparse's usage block
        commands = next(a.choices for a in parser._actions if isinstance(a, Subparsers))
        print(f"attnscope: error: name a command: {', '.join(commands)} (attnscope --help says what each does)",  # noqa: T201
              file=sys.stderr)  # fmt: skip
        return 2
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command != "serve":  # the server tunes it from its settings (keep_freed_mb)
        keep_freed_memory()
    try:
        if args.command in MODEL_COMMANDS:
            args.model = _model_folder(args.model)
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "build-native":  # never at serve time: attnscope/nn/native/library.py
            from attnscope.nn.native.__main__ import main as build_native

            return build_native(["--force"] if args.force else [])
        if args.command == "train":
            return cmd_train(args)
        if args.command == "evaluate":
            return cmd_evaluate(args)
        if args.command == "align-corpus":
            return cmd_align_corpus(args)
        if args.command == "distill":
            from attnscope.training.recipes import distill

            print(distill(args.model, data_dir(args.data_dir), args.out, split=args.split, beam_size=args.beam,  # noqa: T201
                          batch_size=args.batch_size, device=args.device))
            return 0
        if args.command == "tokenizer":
            return cmd_tokenizer(args)
        if args.command == "import":
            from attnscope.hf.importer import import_model

            done = import_model(args.source, args.out, name=args.name, dtype=args.dtype, pair=args.pair)
            print(json.dumps({"folder": str(done.folder), **done.card}, indent=2))  # noqa: T201
            return 0
        if args.command.startswith("vision-"):
            from attnscope.vision.cli import run as run_vision

            return run_vision(args)
        if args.command == "seal":
            from attnscope.seal import run as run_seal

            return run_seal(args)
        if args.command == "analyze":
            from attnscope.analysis.cli import run as run_analyze

            return run_analyze(args)
        if args.command == "download":
            from attnscope.training.data import download

            print(download(data_dir(args.data_dir)))  # noqa: T201
            return 0
    except (ValueError, OSError, TypeError, OptionalEngineError) as err:  # OSError: a missing or unwritable path
        said = _model_error(args.model, err) if args.command in MODEL_COMMANDS else None
        print(f"attnscope {args.command}: error: {said or _one_line(err)}", file=sys.stderr)  # noqa: T201
        return 2
    except KeyboardInterrupt:
        print(f"attnscope {args.command}: interrupted", file=sys.stderr)  # noqa: T201
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
