"""The training loop: token-count batches, label smoothing, warm-up + inverse-sqrt schedule,
gradient clipping, bf16 autocast on CUDA, validation BLEU each epoch, early stopping, the best
checkpoint kept, resume after interruption, optional checkpoint averaging, and a finished model
folder (fp16 safetensors, tokenizer, card with curves and test BLEU) at the end."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch.nn import functional as F
from tqdm import tqdm

from app.alignment.corpus import AlignedPair, default_align_dir, load_references
from app.alignment.evaluate import score_heads
from app.nn.base import Seq2Seq
from app.nn.config import PAD_ID, ModelConfig, config_to_dict, score_of
from app.nn.factory import build_model
from app.repository import WEIGHTS_FILE, LoadedModel, save_model_folder, write_card
from app.text.tokenizer import Tokenizer
from app.training.copies import augment_corpus
from app.training.data import Example, collate, encode_pairs, iterate, load_parallel, token_batches
from app.training.distributed import join
from app.training.evaluate import bleu_scores, evaluate, translate_corpus
from app.training.presets import TrainConfig
from app.training.recipes import doubled, rdrop_kl, read_distilled
from app.training.supervision import (
    HeadSupervision,
    alignment_targets,
    encode_aligned,
    head_alignment_loss,
    trainable_head_parameters,
)
from app.translator import Translator

logger = logging.getLogger(__name__)

StateDict = dict[str, torch.Tensor]


def ckpt_exists(run_dir: Path) -> bool:
    return (run_dir / "checkpoint.pt").is_file()


def load_weights(folder: str | Path) -> StateDict:
    """A model folder's weights (fp16 on disk; ``load_state_dict`` copies them into fp32)."""
    return load_file(str(Path(folder) / WEIGHTS_FILE))


def hardware_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({torch.get_num_threads()} threads)"


def inverse_sqrt(warmup: int) -> Callable[[int], float]:
    """Linear warm-up to 1 over ``warmup`` steps, then ``sqrt(warmup / step)``."""
    def factor(step: int) -> float:
        step = max(step, 1)
        return step / warmup if step < warmup else math.sqrt(warmup / step)
    return factor


def cpu_state(model: Seq2Seq) -> StateDict:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def average_states(states: list[StateDict]) -> StateDict:
    return {k: sum(s[k].float() for s in states) / len(states) for k in states[0]}  # type: ignore[misc]


def fp16_round_trip(model: Seq2Seq) -> None:
    """Round the weights through fp16 so every reported number is the shipped model's."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


@torch.no_grad()
def validation_loss(model: Seq2Seq, examples: list[Example], batches: list[list[int]], device: torch.device) -> float:
    model.eval()
    total, count = 0.0, 0
    for src, tgt_in, gold in iterate(examples, batches, device):
        logits = model(src, tgt_in).logits.float()
        total += F.cross_entropy(logits.view(-1, logits.size(-1)), gold.view(-1), ignore_index=PAD_ID, reduction="sum").item()
        count += int(gold.ne(PAD_ID).sum())
    return total / max(count, 1)


def train(
    model_config: ModelConfig,
    config: TrainConfig,
    *,
    data_dir: str | Path,
    out_dir: str | Path,
    run_dir: str | Path,
    source_lang: str = "en",
    target_lang: str = "de",
    tokenizer_path: str | Path | None = None,
    device: str | None = None,
    resume: bool = False,
    evaluate_test: bool = True,
    progress: bool = True,
    init_from: str | Path | None = None,
    supervision: HeadSupervision | None = None,
    align_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Train, pick the best weights, evaluate and write the model folder ``out_dir``.
    Returns the card. ``run_dir`` keeps the checkpoints that ``resume`` continues from.
    ``init_from``: a model folder whose weights start the run (fine-tuning; pass its config and
    tokenizer too). ``supervision``: train one cross-attention head to align (Garg et al. 2019).
    ``align_dir``: the word alignments that copy augmentation reads (default beside the corpus)."""
    started = time.monotonic()
    world, dev = join(device)  # under torchrun: this process's rank and device (see distributed.py)
    progress = progress and world.is_main
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    train_pairs = load_parallel(data_dir, "train", source_lang, target_lang)
    val_pairs = load_parallel(data_dir, "val", source_lang, target_lang)

    tok_file = run_dir / "tokenizer.model"
    tokenizer: Tokenizer | None
    resumed = tok_file.is_file() and resume
    if resumed:  # every rank reads the run's file, so no rank may rewrite it (below)
        tokenizer = Tokenizer.load(tok_file)
    elif tokenizer_path:
        tokenizer = Tokenizer.load(tokenizer_path)
    elif not world.is_main:  # rank 0 trains it; the others read its file below
        tokenizer = None
    else:
        logger.info("training a %d-piece SentencePiece model on %d pairs", config.vocab_size, len(train_pairs))
        tokenizer = Tokenizer.train(
            [s for pair in train_pairs for s in pair],
            config.vocab_size,
            seed=config.seed,
            byte_fallback=config.byte_fallback,
        )
    if tokenizer is not None and world.is_main and not resumed:
        tokenizer.save(tok_file)
    world.barrier()
    tokenizer = tokenizer or Tokenizer.load(tok_file)
    model_config = dataclasses.replace(model_config, vocab_size=tokenizer.vocab_size)

    train_ex: list[Example]
    val_refs: list[AlignedPair] = []
    if supervision is None:
        train_ex = encode_pairs(train_pairs, tokenizer.encode, config.max_train_tokens)
    else:
        supervision.check(model_config)
        refs = supervision.references("train", source_lang, target_lang, len(train_pairs))
        train_ex = list(encode_aligned(train_pairs, refs, tokenizer, config.max_train_tokens))
        val_refs = supervision.references("val", source_lang, target_lang, len(val_pairs))
    distilled = 0
    if config.distill_file:  # a teacher's translations of the sources, beside the references
        extra = encode_pairs(read_distilled(config.distill_file), tokenizer.encode, config.max_train_tokens)
        train_ex, distilled = train_ex + extra, len(extra)
        logger.info("added %d distilled pairs from %s", distilled, config.distill_file)
    copied = 0
    if config.copy_augment > 0:  # numbers, names and emoji carried over (app.training.copies)
        refs = load_references(align_dir or default_align_dir(data_dir), "train", source_lang, target_lang, len(train_pairs))
        augmented = augment_corpus(train_pairs, refs, config.copy_augment, seed=config.seed)
        extra = encode_pairs([(a.source, a.target) for a in augmented], tokenizer.encode, config.max_train_tokens)
        train_ex, copied = train_ex + extra, len(extra)
        logger.info("added %d copy-augmented pairs", copied)
    val_ex = encode_pairs(val_pairs, tokenizer.encode, 10_000)
    val_batches = token_batches(val_ex, config.batch_tokens, shuffle=False)
    model = build_model(model_config).to(dev)
    if init_from is not None and not (resume and ckpt_exists(run_dir)):
        model.load_state_dict(load_weights(init_from))
        logger.info("initialised from %s", init_from)
    net = world.wrap(model, dev)  # DistributedDataParallel under torchrun, else the model itself
    if world.distributed:
        torch.manual_seed(config.seed + world.rank)  # the same weights, a different dropout stream
    loaded = LoadedModel(out_dir.name, out_dir, model_config, model, tokenizer, source_lang, target_lang)
    translator = Translator(loaded, max_source_tokens=10_000)
    groups: list[dict[str, Any]] = [{"params": list(model.parameters())}]
    if supervision is not None and supervision.only_head:
        # no weight decay there: AdamW's decoupled decay shrinks whole tensors, gradient or not,
        # so it would move the other heads' rows of the query and key projections too
        groups = [{"params": trainable_head_parameters(model, supervision), "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(
        groups, lr=config.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, inverse_sqrt(config.warmup_steps))
    state: dict[str, Any] = {"epoch": 0, "step": 0, "curve": [], "best_bleu": -1.0, "best_epoch": 0, "bad": 0, "train_s": 0.0}
    best: StateDict = cpu_state(model)
    recent: deque[StateDict] = deque(maxlen=max(config.average_last, 1))
    ckpt = run_dir / "checkpoint.pt"
    if resume and ckpt.is_file():
        saved = torch.load(ckpt, map_location="cpu", weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        state, best = saved["state"], saved["best"]
        recent.extend(saved["recent"])
        logger.info("resumed from %s at epoch %d, step %d", ckpt, state["epoch"], state["step"])

    n_params = model.num_parameters
    logger.info(
        "%s: %s parameters on %s%s; %d training pairs, %d batches an epoch",
        out_dir.name, f"{n_params:,}", hardware_name(dev), f" x {world.size} processes" if world.distributed else "",
        len(train_ex), len(world.usable(token_batches(train_ex, config.batch_tokens, shuffle=False))),
    )
    amp = dev.type == "cuda"
    out_of_time = False
    while state["epoch"] < config.max_epochs and not out_of_time:
        epoch_start = time.monotonic()
        model.train()
        # The same global batches in every process (same seed); each trains on its shard.
        batches = world.usable(token_batches(train_ex, config.batch_tokens, shuffle=True, seed=config.seed + state["epoch"]))
        bar = tqdm(total=len(batches), desc=f"epoch {state['epoch'] + 1}", disable=not progress, leave=False)
        loss_sum, tokens_seen, align_sum, n_batches = 0.0, 0, 0.0, 0
        for batch in batches:
            examples = [train_ex[i] for i in world.shard(batch)]
            n_tok = sum(len(train_ex[i].tgt) for i in batch)  # target tokens of the global batch
            src, tgt_in, gold = collate(examples, dev)
            copies = 2 if config.rdrop_alpha > 0 else 1  # R-Drop: the batch twice, two dropout masks
            rows = doubled(src, tgt_in, gold) if copies == 2 else (src, tgt_in, gold)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                out = net(rows[0], rows[1], need_weights=supervision is not None)
            logits = out.logits
            token_loss = F.cross_entropy(
                logits.float().view(-1, logits.size(-1)), rows[2].view(-1),
                ignore_index=PAD_ID, label_smoothing=config.label_smoothing, reduction="sum",
            ) / copies  # still the loss per target token of the batch
            # Per token of the global batch; DDP averages the processes' gradients, hence * size.
            scale = world.size / n_tok
            loss = token_loss * scale
            if copies == 2:
                loss = loss + config.rdrop_alpha * rdrop_kl(logits, gold, PAD_ID) * scale
            if supervision is not None:
                assert out.cross is not None
                targets = alignment_targets(examples * copies, gold.size(1), src.size(1), dev, supervision.rows)
                align_loss = head_alignment_loss(out.cross[:, supervision.layer, supervision.head], targets)
                loss = loss + supervision.weight * align_loss
                align_sum += align_loss.item()
            n_batches += 1
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            optimizer.step()
            scheduler.step()
            state["step"] += 1
            elapsed = time.monotonic() - epoch_start
            stop = bool(config.max_steps and state["step"] >= config.max_steps) or bool(
                config.max_time_s and state["train_s"] + elapsed >= config.max_time_s
            )
            batch_sum, stop = world.sum_and_any(token_loss.item(), stop, dev)  # every process stops together
            loss_sum += batch_sum
            tokens_seen += n_tok
            bar.update(1)
            bar.set_postfix(loss=f"{batch_sum / n_tok:.3f}", tok_s=f"{tokens_seen / max(elapsed, 1e-6):,.0f}")
            if stop:
                out_of_time = True
                break
        bar.close()
        state["train_s"] += time.monotonic() - epoch_start
        state["epoch"] += 1
        if world.is_main:  # validation, curve and checkpoint: rank 0's; the others wait for its state
            val_loss = validation_loss(model, val_ex, val_batches, dev)
            hyps = translate_corpus(translator, [s for s, _ in val_pairs], beam_size=1, batch_size=256, progress=False)
            val_bleu = bleu_scores(hyps, [t for _, t in val_pairs])["lowercase_13a"]
            state["curve"].append({
                "epoch": state["epoch"], "step": state["step"], "train_loss": round(loss_sum / max(tokens_seen, 1), 4),
                "val_loss": round(val_loss, 4), "val_bleu": val_bleu, "lr": scheduler.get_last_lr()[0],
                "time_s": round(time.monotonic() - started, 1),
            })
            if supervision is not None:  # the supervised head as an aligner on val, and its loss
                head = score_heads(loaded, val_pairs, val_refs, rows=supervision.rows)["f1"][supervision.layer][supervision.head]
                state["curve"][-1].update(train_align_loss=round(align_sum / max(n_batches, 1), 4), val_align_f1=head)
                logger.info("%s epoch %d: head L%dH%d alignment loss %.3f, val F1 %.3f", out_dir.name, state["epoch"],
                            supervision.layer, supervision.head, align_sum / max(n_batches, 1), head)
            logger.info(
                "%s epoch %d: train loss %.3f, val loss %.3f, val BLEU %.2f (greedy, lowercased), %.0f s",
                out_dir.name, state["epoch"], loss_sum / max(tokens_seen, 1), val_loss, val_bleu, time.monotonic() - epoch_start,
            )
            recent.append(cpu_state(model))
            if val_bleu > state["best_bleu"]:
                state.update(best_bleu=val_bleu, best_epoch=state["epoch"], bad=0)
                best = cpu_state(model)
            else:
                state["bad"] += 1
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                        "state": state, "best": best, "recent": list(recent)}, ckpt)
        state = world.broadcast(state)
        if state["bad"] >= config.patience:
            logger.info("early stop: no better validation BLEU for %d epochs", config.patience)
            break

    world.close()
    if not world.is_main:  # rank 0 writes the model folder and the card
        return {}
    chosen = f"best epoch {state['best_epoch']}"
    model.load_state_dict(best)
    if config.average_last > 1 and len(recent) > 1:
        model.load_state_dict(average_states(list(recent)))
        model.eval()
        hyps = translate_corpus(translator, [s for s, _ in val_pairs], beam_size=1, batch_size=256, progress=False)
        avg_bleu = bleu_scores(hyps, [t for _, t in val_pairs])["lowercase_13a"]
        logger.info("average of last %d checkpoints: val BLEU %.2f (best single %.2f)", len(recent), avg_bleu, state["best_bleu"])
        if avg_bleu > state["best_bleu"]:
            chosen = f"average of the last {len(recent)} epochs"
        else:
            model.load_state_dict(best)
    model.eval()
    fp16_round_trip(model)

    card: dict[str, Any] = {
        "id": out_dir.name,
        "architecture": model_config.architecture,
        "score": score_of(model_config),
        "source_lang": source_lang,
        "target_lang": target_lang,
        "parameters": n_params,
        "hyperparameters": {"model": config_to_dict(model_config), "training": dataclasses.asdict(config)},
        "training": {
            "time_s": round(state["train_s"], 1), "hardware": hardware_name(dev), "epochs": state["epoch"],
            "steps": state["step"], "selected": chosen, "best_val_bleu": state["best_bleu"],
            "train_pairs": len(train_ex), "distilled_pairs": distilled, "copy_augmented_pairs": copied, "stopped_by_time_budget": out_of_time, "processes": world.size,
            "init_from": str(init_from) if init_from else None,
            "alignment_supervision": dataclasses.asdict(supervision) if supervision else None,
        },
        "curve": state["curve"],
        "val_bleu_convention": "greedy decoding, sacreBLEU lowercased 13a",
    }
    save_model_folder(out_dir, model, tokenizer, source_lang=source_lang, target_lang=target_lang, card=card)
    if evaluate_test:
        card.update(evaluate(translator, data_dir, beam_size=config.eval_beam, progress=progress))
        write_card(out_dir, card)
    card["total_time_s"] = round(time.monotonic() - started, 1)
    write_card(out_dir, card)
    return card
