"""The one place a torch device is chosen, for the CLI, training and serving alike."""

from __future__ import annotations

import torch


def resolve_device(name: str | torch.device | None = None) -> torch.device:
    """``None`` (or ``""``) -> ``cuda:0`` when available, else ``cpu``.

    ValueError naming the problem for a name torch does not know or a CUDA device this machine
    does not have, so a command fails with one clear line instead of deep inside the model."""
    if isinstance(name, torch.device):
        name = str(name)
    if not name:
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"unknown device {name!r}: {err}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} requested but CUDA is not available")
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r} requested but there are {torch.cuda.device_count()} GPUs")
        device = torch.device("cuda", index)
    return device
