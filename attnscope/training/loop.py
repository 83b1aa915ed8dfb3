"""The epoch loop of a training run: a :class:`Session` (model, optimiser, schedule and the
progress a checkpoint keeps), one epoch of token batches (label smoothing, R-Drop, a supervised
head's alignment loss, gradient clipping, bf16 autocast on CUDA), and rank 0's validation after
each epoch (loss, greedy BLEU, best weights, checkpoint)."""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch.nn import functional as F
from tqdm import tqdm

from attnscope.alignment.evaluate import score_heads
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import PAD_ID, ModelConfig
from attnscope.nn.factory import build_model
from attnscope.repository import WEIGHTS_FILE, LoadedModel
from attnscope.text.tokenizer import Tokenizer
from attnscope.training.data import Example, collate, iterate, token_batches
from attnscope.training.distributed import World
from attnscope.training.evaluate import bleu_scores, translate_corpus
from attnscope.training.presets import TrainConfig
from attnscope.training.recipes import doubled, rdrop_kl
from attnscope.training.run import Corpus, TrainRun
from attnscope.training.supervision import (
    HeadSupervision,
    alignment_targets,
    head_alignment_loss,
    trainable_head_parameters,
)
from attnscope.translator import Translator

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


@torch.no_grad()
def validation_loss(model: Seq2Seq, examples: list[Example], batches: list[list[int]], device: torch.device) -> float:
    model.eval()
    total, count = 0.0, 0
    for src, tgt_in, gold in iterate(examples, batches, device):
        logits = model(src, tgt_in).logits.float()
        total += F.cross_entropy(logits.view(-1, logits.size(-1)), gold.view(-1), ignore_index=PAD_ID, reduction="sum").item()
        count += int(gold.ne(PAD_ID).sum())
    return total / max(count, 1)


@dataclass
class Session:
    """A run's model and optimiser with the progress that a checkpoint keeps (``state``:
    epoch, step, curve, best BLEU and epoch, epochs without improvement, training seconds)."""

    model: Seq2Seq
    net: torch.nn.Module
    loaded: LoadedModel
    translator: Translator
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    state: dict[str, Any]
    best: StateDict
    recent: deque[StateDict]


@dataclass
class EpochSums:
    loss: float = 0.0
    tokens: int = 0
    align: float = 0.0
    batches: int = 0


def start_session(
    run: TrainRun, config: TrainConfig, model_config: ModelConfig, tokenizer: Tokenizer, world: World, dev: torch.device
) -> Session:
    """The model (initialised from ``init_from`` or resumed), its optimiser and schedule."""
    run_dir, out_dir, supervision = Path(run.run_dir), Path(run.out_dir), run.supervision
    model = build_model(model_config).to(dev)
    if run.init_from is not None and not (run.resume and ckpt_exists(run_dir)):
        model.load_state_dict(load_weights(run.init_from))
        logger.info("initialised from %s", run.init_from)
    net = world.wrap(model, dev)  # DistributedDataParallel under torchrun, else the model itself
    if world.distributed:
        torch.manual_seed(config.seed + world.rank)  # the same weights, a different dropout stream
    loaded = LoadedModel(out_dir.name, out_dir, model_config, model, tokenizer, run.source_lang, run.target_lang)
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
    session = Session(model, net, loaded, Translator(loaded, max_source_tokens=10_000), optimizer, scheduler,
                      state, cpu_state(model), deque(maxlen=max(config.average_last, 1)))
    ckpt = run_dir / "checkpoint.pt"
    if run.resume and ckpt.is_file():
        saved = torch.load(ckpt, map_location="cpu", weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        session.state, session.best = saved["state"], saved["best"]
        session.recent.extend(saved["recent"])
        logger.info("resumed from %s at epoch %d, step %d", ckpt, session.state["epoch"], session.state["step"])
    return session


def batch_loss(
    session: Session, config: TrainConfig, supervision: HeadSupervision | None, examples: list[Example], dev: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """-> (token loss summed over the batch's target tokens, the unscaled extra terms: R-Drop's
    KL (or 0), the supervised head's alignment loss (or None))."""
    src, tgt_in, gold = collate(examples, dev)
    copies = 2 if config.rdrop_alpha > 0 else 1  # R-Drop: the batch twice, two dropout masks
    rows = doubled(src, tgt_in, gold) if copies == 2 else (src, tgt_in, gold)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        out = session.net(rows[0], rows[1], need_weights=supervision is not None)
    logits = out.logits
    token_loss = F.cross_entropy(
        logits.float().view(-1, logits.size(-1)), rows[2].view(-1),
        ignore_index=PAD_ID, label_smoothing=config.label_smoothing, reduction="sum",
    ) / copies  # still the loss per target token of the batch
    kl = rdrop_kl(logits, gold, PAD_ID) if copies == 2 else torch.zeros(())
    if supervision is None:
        return token_loss, kl, None
    assert out.cross is not None
    targets = alignment_targets(examples * copies, gold.size(1), src.size(1), dev, supervision.rows)
    return token_loss, kl, head_alignment_loss(out.cross[:, supervision.layer, supervision.head], targets)


def train_epoch(
    session: Session, config: TrainConfig, run: TrainRun, train_ex: list[Example], world: World, dev: torch.device
) -> tuple[EpochSums, bool]:
    """One epoch over the shuffled token batches -> its sums, and whether a step or time budget
    ran out (every process stops together)."""
    state, supervision = session.state, run.supervision
    epoch_start = time.monotonic()
    session.model.train()
    # The same global batches in every process (same seed); each trains on its shard.
    batches = world.usable(token_batches(train_ex, config.batch_tokens, shuffle=True, seed=config.seed + state["epoch"]))
    bar = tqdm(total=len(batches), desc=f"epoch {state['epoch'] + 1}", disable=not (run.progress and world.is_main), leave=False)
    sums, stop = EpochSums(), False
    for batch in batches:
        examples = [train_ex[i] for i in world.shard(batch)]
        n_tok = sum(len(train_ex[i].tgt) for i in batch)  # target tokens of the global batch
        token_loss, kl, align_loss = batch_loss(session, config, supervision, examples, dev)
        # Per token of the global batch; DDP averages the processes' gradients, hence * size.
        scale = world.size / n_tok
        loss = token_loss * scale
        if config.rdrop_alpha > 0:
            loss = loss + config.rdrop_alpha * kl * scale
        if supervision is not None and align_loss is not None:
            loss = loss + supervision.weight * align_loss
            sums.align += align_loss.item()
        sums.batches += 1
        session.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(session.model.parameters(), config.clip_norm)
        session.optimizer.step()
        session.scheduler.step()
        state["step"] += 1
        elapsed = time.monotonic() - epoch_start
        stop = bool(config.max_steps and state["step"] >= config.max_steps) or bool(
            config.max_time_s and state["train_s"] + elapsed >= config.max_time_s
        )
        batch_sum, stop = world.sum_and_any(token_loss.item(), stop, dev)  # every process stops together
        sums.loss += batch_sum
        sums.tokens += n_tok
        bar.update(1)
        bar.set_postfix(loss=f"{batch_sum / n_tok:.3f}", tok_s=f"{sums.tokens / max(elapsed, 1e-6):,.0f}")
        if stop:
            break
    bar.close()
    state["train_s"] += time.monotonic() - epoch_start
    state["epoch"] += 1
    return sums, stop


def val_bleu(session: Session, val_pairs: list[tuple[str, str]]) -> float:
    """Greedy, lowercased sacreBLEU of the model on the validation pairs."""
    hyps = translate_corpus(session.translator, [s for s, _ in val_pairs], beam_size=1, batch_size=256, progress=False)
    return bleu_scores(hyps, [t for _, t in val_pairs])["lowercase_13a"]


def validate(
    session: Session, run: TrainRun, corpus: Corpus, sums: EpochSums, clock: tuple[float, float], dev: torch.device
) -> None:
    """Rank 0 after an epoch: validation loss and BLEU on the curve, the best weights, the
    checkpoint. ``clock``: when the run and the epoch started (``time.monotonic``)."""
    state, supervision, name = session.state, run.supervision, Path(run.out_dir).name
    started, epoch_start = clock
    val_loss = validation_loss(session.model, corpus.val_ex, corpus.val_batches, dev)
    bleu = val_bleu(session, corpus.val_pairs)
    state["curve"].append({
        "epoch": state["epoch"], "step": state["step"], "train_loss": round(sums.loss / max(sums.tokens, 1), 4),
        "val_loss": round(val_loss, 4), "val_bleu": bleu, "lr": session.scheduler.get_last_lr()[0],
        "time_s": round(time.monotonic() - started, 1),
    })
    if supervision is not None:  # the supervised head as an aligner on val, and its loss
        f1 = score_heads(session.loaded, corpus.val_pairs, corpus.val_refs, rows=supervision.rows)["f1"]
        head = f1[supervision.layer][supervision.head]
        state["curve"][-1].update(train_align_loss=round(sums.align / max(sums.batches, 1), 4), val_align_f1=head)
        logger.info("%s epoch %d: head L%dH%d alignment loss %.3f, val F1 %.3f", name, state["epoch"],
                    supervision.layer, supervision.head, sums.align / max(sums.batches, 1), head)
    logger.info(
        "%s epoch %d: train loss %.3f, val loss %.3f, val BLEU %.2f (greedy, lowercased), %.0f s",
        name, state["epoch"], sums.loss / max(sums.tokens, 1), val_loss, bleu, time.monotonic() - epoch_start,
    )
    session.recent.append(cpu_state(session.model))
    if bleu > state["best_bleu"]:
        state.update(best_bleu=bleu, best_epoch=state["epoch"], bad=0)
        session.best = cpu_state(session.model)
    else:
        state["bad"] += 1
    torch.save({"model": session.model.state_dict(), "optimizer": session.optimizer.state_dict(),
                "scheduler": session.scheduler.state_dict(), "state": state, "best": session.best,
                "recent": list(session.recent)}, Path(run.run_dir) / "checkpoint.pt")
