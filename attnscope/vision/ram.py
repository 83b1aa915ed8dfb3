"""The Recurrent Attention Model (Mnih et al. 2014): an agent that sees the image only through
a few glimpses and learns where to look with REINFORCE.

    l_t ~ N(f_l(h_{t-1}), σ²)                 location network (Gaussian policy, fixed σ)
    g_t = f_g(ρ(x, l_t), l_t)                 glimpse network over the retina
    h_t = f_h(g_t, h_{t-1})                   core network (an LSTM cell)
    p(y | h_t) = softmax(f_a(h_t))            action network (the class)
    b_t = f_b(h_{t-1})                        learned baseline for the reward r_T = [ŷ_T = y]

Locations are (x, y) in [-1, 1]² with (-1, -1) the top-left corner of the image. Nothing is
stored on the modules: every forward pass returns its own :class:`RAMOutput`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnscope.vision.data import crop


@dataclass(frozen=True)
class RAMConfig:
    canvas: int = 60  # side of the input image the model was trained on
    patch: int = 12  # side of each retina patch after scaling (g in the paper)
    scales: int = 3  # k patches, each `factor` times the side of the previous
    factor: int = 2
    glimpses: int = 7
    glimpse_hidden: int = 128  # h_g and h_l
    hidden: int = 256  # glimpse vector and core state
    std: float = 0.15  # σ of the location policy, in [-1, 1] units
    classes: int = 10

    def to_dict(self) -> dict[str, int | float]:
        return asdict(self)

    def sizes(self) -> list[int]:
        """Side of each retina patch in canvas pixels, smallest first."""
        return [self.patch * self.factor**k for k in range(self.scales)]


def to_pixels(loc: Tensor, side: int) -> Tensor:
    """[-1, 1] coordinates (..., 2) -> continuous pixel coordinates on a ``side``² image."""
    return (loc + 1) / 2 * side


def retina(images: Tensor, loc: Tensor, *, patch: int, scales: int, factor: int) -> Tensor:
    """ρ(x, l): ``scales`` square patches centred on ``loc`` (B, 2) of ``images`` (B, 1, H, W),
    of sides patch·factor^k, each average-pooled to patch×patch; outside the image is black.
    Returns (B, scales, patch, patch). A patch of side s centred at pixel coordinate c starts at
    round(c - s/2), so l = (0, 0) on a 60² image gives the 12² patch of rows and columns 24-35."""
    b, _, h, w = images.shape
    largest = patch * factor ** (scales - 1)
    padded = F.pad(images[:, 0], (largest, largest, largest, largest))  # (B, H+2P, W+2P)
    centre = to_pixels(loc, 1) * torch.tensor([w, h], device=loc.device, dtype=loc.dtype)  # (B, 2) x, y
    out = []
    for k in range(scales):
        side = patch * factor**k
        corner = torch.floor(centre - side / 2 + 0.5).long() + largest  # (B, 2) x, y in padded
        corner = corner.clamp(min=0)
        corner[:, 0] = corner[:, 0].clamp(max=w + 2 * largest - side)
        corner[:, 1] = corner[:, 1].clamp(max=h + 2 * largest - side)
        piece = crop(padded, corner[:, 1], corner[:, 0], side)  # (B, side, side)
        out.append(F.avg_pool2d(piece[:, None], factor**k)[:, 0] if k else piece)
    return torch.stack(out, dim=1)


class GlimpseNetwork(nn.Module):
    """f_g: g = ReLU(W_1 h_g + W_2 h_l), h_g = ReLU(θ ρ(x, l)), h_l = ReLU(θ' l)."""

    def __init__(self, config: RAMConfig) -> None:
        super().__init__()
        self.config = config
        self.what = nn.Linear(config.scales * config.patch**2, config.glimpse_hidden)
        self.where = nn.Linear(2, config.glimpse_hidden)
        self.what_out = nn.Linear(config.glimpse_hidden, config.hidden)
        self.where_out = nn.Linear(config.glimpse_hidden, config.hidden)

    def forward(self, images: Tensor, loc: Tensor) -> Tensor:
        """images (B, 1, H, W), loc (B, 2) -> glimpse vector (B, hidden)."""
        c = self.config
        patches = retina(images, loc, patch=c.patch, scales=c.scales, factor=c.factor)
        h_g = F.relu(self.what(patches.flatten(1)))
        h_l = F.relu(self.where(loc))
        return F.relu(self.what_out(h_g) + self.where_out(h_l))


class LocationNetwork(nn.Module):
    """f_l: the mean of the Gaussian policy over the next location, tanh(W h) in [-1, 1]²."""

    def __init__(self, config: RAMConfig) -> None:
        super().__init__()
        self.std = config.std
        self.mean = nn.Linear(config.hidden, 2)

    def forward(self, h: Tensor, sample: bool) -> tuple[Tensor, Tensor]:
        """h (B, hidden) -> (location (B, 2), its log-probability (B,)). The location is a
        sample (detached: gradients reach f_l only through the log-probability) or the mean."""
        mean = torch.tanh(self.mean(h.detach()))
        loc = (mean + self.std * torch.randn_like(mean)).detach() if sample else mean.detach()
        log_prob = gaussian_log_prob(loc, mean, self.std)
        return loc.clamp(-1, 1), log_prob


def gaussian_log_prob(x: Tensor, mean: Tensor, std: float) -> Tensor:
    """log N(x; mean, std² I) summed over the last dimension: (..., D) -> (...)."""
    z = (x - mean) / std
    return (-0.5 * z**2 - math.log(std) - 0.5 * math.log(2 * math.pi)).sum(-1)


@dataclass
class RAMOutput:
    """One episode per image: ``locations`` (B, T, 2) where each glimpse looked (in [-1, 1]),
    ``log_pi`` (B, T) their log-probabilities, ``baselines`` (B, T) b_t, and ``class_log_probs``
    (B, T, classes) the action network's answer after each glimpse (the last one is the answer)."""

    locations: Tensor
    log_pi: Tensor
    baselines: Tensor
    class_log_probs: Tensor


class RecurrentAttentionModel(nn.Module):
    def __init__(self, config: RAMConfig) -> None:
        super().__init__()
        self.config = config
        self.glimpse = GlimpseNetwork(config)
        self.core = nn.LSTMCell(config.hidden, config.hidden)
        self.locator = LocationNetwork(config)
        self.action = nn.Linear(config.hidden, config.classes)
        self.baseline = nn.Linear(config.hidden, 1)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, images: Tensor, sample: bool = True, glimpses: int | None = None) -> RAMOutput:
        """images (B, 1, H, W) with H = W = config.canvas -> :class:`RAMOutput` over ``glimpses``
        steps (config.glimpses by default). ``sample=False`` follows the policy's mean (serving)."""
        b = images.shape[0]
        h = images.new_zeros(b, self.config.hidden)
        c = images.new_zeros(b, self.config.hidden)
        locations, log_pis, baselines, answers = [], [], [], []
        for _ in range(glimpses or self.config.glimpses):
            loc, log_pi = self.locator(h, sample)
            baselines.append(self.baseline(h.detach())[:, 0])  # state before choosing l_t
            h, c = self.core(self.glimpse(images, loc), (h, c))
            locations.append(loc)
            log_pis.append(log_pi)
            answers.append(F.log_softmax(self.action(h), dim=-1))
        return RAMOutput(
            locations=torch.stack(locations, 1),
            log_pi=torch.stack(log_pis, 1),
            baselines=torch.stack(baselines, 1),
            class_log_probs=torch.stack(answers, 1),
        )


def reinforce_loss(log_pi: Tensor, reward: Tensor, baseline: Tensor) -> Tensor:
    """REINFORCE with a baseline: -E[Σ_t log π(l_t) (R - b_t)], the advantage held constant.
    log_pi (B, T), reward (B,), baseline (B, T) -> scalar. Minimising it raises the
    log-probability of actions whose reward beat the baseline."""
    advantage = (reward[:, None] - baseline).detach()
    return -(log_pi * advantage).sum(1).mean()


@dataclass
class RAMLosses:
    total: Tensor
    classification: Tensor
    reinforce: Tensor
    baseline: Tensor
    reward: Tensor  # (B,) 1 where the final answer was right


def ram_losses(out: RAMOutput, labels: Tensor, *, every_step: bool = True) -> RAMLosses:
    """The hybrid loss of the paper: cross-entropy of the action network + REINFORCE on
    r_T = [argmax p(y | h_T) = y] + squared error of the baseline. With ``every_step`` the
    cross-entropy is averaged over all glimpses (our choice, so the class probabilities the
    page shows after each glimpse mean something); the reward is always the final answer's."""
    log_probs = out.class_log_probs  # (B, T, C)
    if every_step:
        nll = F.nll_loss(log_probs.flatten(0, 1), labels.repeat_interleave(log_probs.shape[1]))
    else:
        nll = F.nll_loss(log_probs[:, -1], labels)
    reward = (log_probs[:, -1].argmax(-1) == labels).float()
    reinforce = reinforce_loss(out.log_pi, reward, out.baselines)
    baseline = F.mse_loss(out.baselines, reward[:, None].expand_as(out.baselines))
    return RAMLosses(nll + reinforce + baseline, nll, reinforce, baseline, reward)
