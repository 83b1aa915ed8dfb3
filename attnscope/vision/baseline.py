"""The full-image baseline for the RAM comparison: a small CNN that sees every pixel, its width
chosen so that it has (about) as many parameters as the RAM it is compared with.

conv5×5(w) → pool2 → conv5×5(2w) → pool2 → conv3×3(4w) → global max pool → linear(classes).
The global max pool makes it translation invariant, so it is a strong baseline on translated
canvases: the comparison is about seeing everything at once against a few glimpses."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class BaselineConfig:
    canvas: int = 60
    width: int = 32
    classes: int = 10

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class FullImageCNN(nn.Module):
    def __init__(self, config: BaselineConfig) -> None:
        super().__init__()
        self.config = config
        w = config.width
        self.conv1 = nn.Conv2d(1, w, 5, padding=2)
        self.conv2 = nn.Conv2d(w, 2 * w, 5, padding=2)
        self.conv3 = nn.Conv2d(2 * w, 4 * w, 3, padding=1)
        self.head = nn.Linear(4 * w, config.classes)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, images: Tensor) -> Tensor:
        """images (B, 1, H, W) -> class log-probabilities (B, classes)."""
        x = F.max_pool2d(F.relu(self.conv1(images)), 2)  # (B, w, H/2, W/2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (B, 2w, H/4, W/4)
        x = F.relu(self.conv3(x)).amax(dim=(2, 3))  # (B, 4w)
        return F.log_softmax(self.head(x), dim=-1)


def count_parameters(width: int, classes: int = 10) -> int:
    """Parameters of :class:`FullImageCNN` at ``width`` (closed form, no model built)."""
    w = width
    return (25 * w + w) + (25 * w * 2 * w + 2 * w) + (9 * 2 * w * 4 * w + 4 * w) + (4 * w * classes + classes)


def matched_config(target_parameters: int, canvas: int = 60, classes: int = 10) -> BaselineConfig:
    """The width whose parameter count is closest to ``target_parameters``."""
    best = min(range(1, 512), key=lambda w: abs(count_parameters(w, classes) - target_parameters))
    return BaselineConfig(canvas=canvas, width=best, classes=classes)
