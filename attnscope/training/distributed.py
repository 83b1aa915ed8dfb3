"""Data-parallel training under ``torchrun``: one process per device, DistributedDataParallel.

Launched by ``torchrun --nproc-per-node N -m attnscope.cli train ...`` (``WORLD_SIZE`` > 1 in the
environment), every process builds the same model, draws the same shuffled list of token batches
(the same seed) and trains on its shard of each one, so ``--batch-tokens`` stays the *global*
batch: N processes see exactly the batches one process would, each a 1/N slice. The loss is
normalised by the global batch's token count, so the averaged gradient equals the one process
gradient of the whole batch. Rank 0 alone validates, writes checkpoints, the model folder and its
card, and shows progress bars; the others follow its decisions (state broadcast after each epoch).
NCCL on CUDA devices (``cuda:LOCAL_RANK``), gloo on CPUs. Without ``torchrun`` nothing changes:
:data:`SINGLE` is a world of one, and no collective is ever called.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
from torch import distributed as dist
from torch import nn

from attnscope.device import resolve_device

T = TypeVar("T")
# Rank 0 validates (greedy BLEU) while the others wait in a broadcast: allow it plenty of time.
COLLECTIVE_TIMEOUT = timedelta(hours=2)


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def shard(self, batch: list[int]) -> list[int]:
        """This process's slice of a global batch (every ``size``-th example from ``rank``)."""
        return batch[self.rank :: self.size]

    def usable(self, batches: list[list[int]]) -> list[list[int]]:
        """Global batches every process gets at least one example of (a batch with fewer
        examples than processes, one very long sentence, is left out when distributed)."""
        return [b for b in batches if len(b) >= self.size]

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        """``model`` in DistributedDataParallel when distributed (gradients averaged over the
        processes in backward), else ``model`` itself."""
        if not self.distributed:
            return model
        ids = [device.index] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def sum_and_any(self, value: float, flag: bool, device: torch.device) -> tuple[float, bool]:
        """(sum of ``value`` over the processes, whether any process raised ``flag``)."""
        if not self.distributed:
            return value, flag
        both = torch.tensor([value, float(flag)], dtype=torch.float64, device=device)
        dist.all_reduce(both)
        return float(both[0]), bool(both[1] > 0)

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` (any picklable value) on every process."""
        if not self.distributed:
            return obj
        box: list[Any] = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def close(self) -> None:
        """Tear the process group down on every rank together: a rank that destroys its gloo pairs
        while a peer still holds them can abort at exit ("terminate called without an active
        exception", seen once in a 2-process test run), so all ranks meet at a barrier first."""
        if self.distributed and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


SINGLE = World()


def join(device: str | None) -> tuple[World, torch.device]:
    """The world this process is part of and its device. Under ``torchrun`` this initialises the
    process group (NCCL for CUDA, gloo for the CPU) and quiets logging on every rank but 0."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return SINGLE, resolve_device(device)
    world = World(rank=int(os.environ["RANK"]), size=size, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    dev = resolve_device(device)
    if dev.type == "cuda":
        dev = resolve_device(f"cuda:{world.local_rank}")
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    if not world.is_main:
        logging.getLogger().setLevel(logging.WARNING)
    return world, dev
