"""Training a model: :func:`train` runs a :class:`TrainRun` (token-count batches, label smoothing,
warm-up + inverse-sqrt schedule, gradient clipping, bf16 autocast on CUDA, validation BLEU each
epoch, early stopping, the best checkpoint kept, resume after interruption, optional checkpoint
averaging) and writes a finished model folder (fp16 safetensors, tokenizer, card with curves and
test BLEU). The run's inputs are prepared in :mod:`attnscope.training.run`, the epochs run in
:mod:`attnscope.training.loop`."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import torch

from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import ModelConfig, config_to_dict, score_of
from attnscope.repository import save_model_folder, write_card
from attnscope.training.data import token_batches
from attnscope.training.distributed import join
from attnscope.training.evaluate import evaluate
from attnscope.training.loop import (
    Session,
    StateDict,
    hardware_name,
    start_session,
    train_epoch,
    val_bleu,
    validate,
)
from attnscope.training.presets import TrainConfig
from attnscope.training.run import Corpus, TrainRun, encode_corpus, load_tokenizer

__all__ = ["TrainRun", "average_states", "train"]

logger = logging.getLogger(__name__)


def average_states(states: list[StateDict]) -> StateDict:
    return {k: sum(s[k].float() for s in states) / len(states) for k in states[0]}  # type: ignore[misc]


def fp16_round_trip(model: Seq2Seq) -> None:
    """Round the weights through fp16 so every reported number is the shipped model's."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


def choose_weights(session: Session, config: TrainConfig, corpus: Corpus) -> str:
    """Load the weights the model folder gets: the best epoch's, or the average of the last
    ``average_last`` epochs' where that scores better on validation; -> which was chosen."""
    state, recent, model = session.state, session.recent, session.model
    chosen = f"best epoch {state['best_epoch']}"
    model.load_state_dict(session.best)
    if config.average_last > 1 and len(recent) > 1:
        model.load_state_dict(average_states(list(recent)))
        model.eval()
        avg_bleu = val_bleu(session, corpus.val_pairs)
        logger.info("average of last %d checkpoints: val BLEU %.2f (best single %.2f)", len(recent), avg_bleu, state["best_bleu"])
        if avg_bleu > state["best_bleu"]:
            chosen = f"average of the last {len(recent)} epochs"
        else:
            model.load_state_dict(session.best)
    model.eval()
    fp16_round_trip(model)
    return chosen


def model_card(run: TrainRun, config: TrainConfig, session: Session, corpus: Corpus, facts: dict[str, Any]) -> dict[str, Any]:
    """The card of the finished model; ``facts``: what the loop measured (``selected``,
    ``stopped_by_time_budget``, ``processes``, ``hardware``)."""
    state, model_config = session.state, session.loaded.config
    return {
        "id": Path(run.out_dir).name,
        "architecture": model_config.architecture,
        "score": score_of(model_config),
        "source_lang": run.source_lang,
        "target_lang": run.target_lang,
        "parameters": session.model.num_parameters,
        "hyperparameters": {"model": config_to_dict(model_config), "training": dataclasses.asdict(config)},
        "training": {
            "time_s": round(state["train_s"], 1), "hardware": facts["hardware"], "epochs": state["epoch"],
            "steps": state["step"], "selected": facts["selected"], "best_val_bleu": state["best_bleu"],
            "train_pairs": len(corpus.train_ex), "distilled_pairs": corpus.distilled, "copy_augmented_pairs": corpus.copied,
            "stopped_by_time_budget": facts["stopped_by_time_budget"], "processes": facts["processes"],
            "init_from": str(run.init_from) if run.init_from else None,
            "alignment_supervision": dataclasses.asdict(run.supervision) if run.supervision else None,
        },
        "curve": state["curve"],
        "val_bleu_convention": "greedy decoding, sacreBLEU lowercased 13a",
    }


def train(model_config: ModelConfig, config: TrainConfig, run: TrainRun) -> dict[str, Any]:
    """Train, pick the best weights, evaluate and write the model folder ``run.out_dir``.
    Returns the card (``{}`` on ranks other than 0, which write nothing)."""
    started = time.monotonic()
    world, dev = join(run.device)  # under torchrun: this process's rank and device (see distributed.py)
    Path(run.run_dir).mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    corpus = Corpus(run.pairs("train"), run.pairs("val"), [], [], [], [])
    tokenizer = load_tokenizer(run, config, world, corpus.train_pairs)
    model_config = dataclasses.replace(model_config, vocab_size=tokenizer.vocab_size)
    encode_corpus(run, config, model_config, tokenizer, corpus)
    session = start_session(run, config, model_config, tokenizer, world, dev)
    logger.info(
        "%s: %s parameters on %s%s; %d training pairs, %d batches an epoch",
        Path(run.out_dir).name, f"{session.model.num_parameters:,}", hardware_name(dev),
        f" x {world.size} processes" if world.distributed else "", len(corpus.train_ex),
        len(world.usable(token_batches(corpus.train_ex, config.batch_tokens, shuffle=False))),
    )
    out_of_time = False
    while session.state["epoch"] < config.max_epochs and not out_of_time:
        epoch_start = time.monotonic()
        sums, out_of_time = train_epoch(session, config, run, corpus.train_ex, world, dev)
        if world.is_main:  # validation, curve and checkpoint: rank 0's; the others wait for its state
            validate(session, run, corpus, sums, (started, epoch_start), dev)
        session.state = world.broadcast(session.state)
        if session.state["bad"] >= config.patience:
            logger.info("early stop: no better validation BLEU for %d epochs", config.patience)
            break
    world.close()
    if not world.is_main:  # rank 0 writes the model folder and the card
        return {}
    facts = {"selected": choose_weights(session, config, corpus), "stopped_by_time_budget": out_of_time,
             "processes": world.size, "hardware": hardware_name(dev)}
    card = model_card(run, config, session, corpus, facts)
    out_dir = Path(run.out_dir)
    save_model_folder(out_dir, session.model, tokenizer, source_lang=run.source_lang, target_lang=run.target_lang, card=card)
    if run.evaluate_test:
        card.update(evaluate(session.translator, run.data_dir, beam_size=config.eval_beam, progress=run.progress and world.is_main))
        write_card(out_dir, card)
    card["total_time_s"] = round(time.monotonic() - started, 1)
    write_card(out_dir, card)
    return card
