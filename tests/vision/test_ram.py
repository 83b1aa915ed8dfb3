from __future__ import annotations

import torch
import torch.nn.functional as F

from attnscope.vision.baseline import FullImageCNN, count_parameters, matched_config
from attnscope.vision.ram import (
    LocationNetwork,
    RAMConfig,
    RecurrentAttentionModel,
    gaussian_log_prob,
    ram_losses,
    reinforce_loss,
    retina,
)

IMAGE = torch.arange(60 * 60, dtype=torch.float32).reshape(1, 1, 60, 60) + 1  # no zero pixel


def patches(x: float, y: float) -> torch.Tensor:
    """(3, 12, 12) retina of IMAGE at location (x, y)."""
    return retina(IMAGE, torch.tensor([[x, y]]), patch=12, scales=3, factor=2)[0]


def test_centre_patches() -> None:
    p = patches(0.0, 0.0)  # centre pixel coordinate (30, 30)
    assert torch.equal(p[0], IMAGE[0, 0, 24:36, 24:36])
    assert torch.equal(p[1], F.avg_pool2d(IMAGE[:, :, 18:42, 18:42], 2)[0, 0])
    assert torch.equal(p[2], F.avg_pool2d(IMAGE[:, :, 6:54, 6:54], 4)[0, 0])


def test_x_is_the_column_and_y_the_row() -> None:
    p = patches(-0.5, 0.5)  # x = 15 px, y = 45 px
    assert torch.equal(p[0], IMAGE[0, 0, 39:51, 9:21])


def test_top_left_border_is_black_outside() -> None:
    p = patches(-1.0, -1.0)  # centred on the image's corner: 3/4 of every patch is outside
    assert torch.equal(p[0, 6:, 6:], IMAGE[0, 0, :6, :6])
    assert p[0, :6].abs().sum() == 0 and p[0, :, :6].abs().sum() == 0
    assert torch.equal(p[2, 6:, 6:], F.avg_pool2d(IMAGE[:, :, :24, :24], 4)[0, 0])
    assert p[2, :6].abs().sum() == 0


def test_bottom_right_border() -> None:
    p = patches(1.0, 1.0)  # centre (60, 60)
    assert torch.equal(p[0, :6, :6], IMAGE[0, 0, 54:, 54:])
    assert p[0, 6:].abs().sum() == 0 and p[0, :, 6:].abs().sum() == 0
    assert torch.equal(p[1, :6, :6], F.avg_pool2d(IMAGE[:, :, 48:, 48:], 2)[0, 0])


def test_batch_elements_get_their_own_locations() -> None:
    images = torch.cat([IMAGE, IMAGE.flip(-1)])
    loc = torch.tensor([[0.0, 0.0], [-1.0, -1.0]])
    both = retina(images, loc, patch=12, scales=2, factor=2)
    assert torch.equal(both[0, 0], patches(0, 0)[0])
    assert torch.equal(both[1, 0, 6:, 6:], IMAGE.flip(-1)[0, 0, :6, :6])


def test_reinforce_raises_the_log_probability_of_a_rewarded_action() -> None:
    """Toy bandit: a Gaussian policy over one number, reward 1 when the action is > 0.5."""
    torch.manual_seed(0)
    mean = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([mean], lr=0.05)
    rewarded = torch.tensor([[1.0]])
    before = gaussian_log_prob(rewarded, mean, 0.5).item()
    for _ in range(20):
        actions = (mean + 0.5 * torch.randn(256, 1)).detach()
        reward = (actions[:, 0] > 0.5).float()
        log_pi = gaussian_log_prob(actions, mean.expand(256, 1), 0.5)[:, None]  # (B, T=1)
        loss = reinforce_loss(log_pi, reward, torch.full((256, 1), float(reward.mean())))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = gaussian_log_prob(rewarded, mean, 0.5).item()
    assert mean.item() > 0.3 and after > before


def test_the_location_network_learns_where_the_reward_is() -> None:
    """RAM's own policy: reward for looking at the right half (x > 0) moves its mean there."""
    torch.manual_seed(1)
    locator = LocationNetwork(RAMConfig(hidden=4, std=0.3))
    optimizer = torch.optim.SGD(locator.parameters(), lr=0.5)
    h = torch.ones(128, 4)
    start = torch.tanh(locator.mean(h[:1]))[0, 0].item()
    for _ in range(30):
        loc, log_pi = locator(h, sample=True)
        reward = (loc[:, 0] > 0).float()
        loss = reinforce_loss(log_pi[:, None], reward, torch.zeros(128, 1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    end = torch.tanh(locator.mean(h[:1]))[0, 0].item()
    assert end > start + 0.3


def test_episode_shapes_and_hybrid_loss() -> None:
    torch.manual_seed(0)
    model = RecurrentAttentionModel(RAMConfig(glimpses=4, hidden=16, glimpse_hidden=8))
    images = torch.rand(5, 1, 60, 60)
    out = model(images)
    assert out.locations.shape == (5, 4, 2) and out.log_pi.shape == (5, 4)
    assert out.baselines.shape == (5, 4) and out.class_log_probs.shape == (5, 4, 10)
    assert out.locations.abs().max() <= 1
    assert torch.allclose(out.class_log_probs.exp().sum(-1), torch.ones(5, 4))
    greedy_a, greedy_b = model(images, sample=False), model(images, sample=False)
    assert torch.equal(greedy_a.locations, greedy_b.locations)  # the mean policy is deterministic
    losses = ram_losses(out, torch.tensor([0, 1, 2, 3, 4]))
    losses.total.backward()
    assert model.locator.mean.weight.grad is not None and model.locator.mean.weight.grad.abs().sum() > 0
    assert model.baseline.weight.grad is not None


def test_baseline_matches_the_parameter_count() -> None:
    ram = RecurrentAttentionModel(RAMConfig())
    config = matched_config(ram.num_parameters)
    cnn = FullImageCNN(config)
    assert cnn.num_parameters == count_parameters(config.width)
    assert abs(cnn.num_parameters - ram.num_parameters) / ram.num_parameters < 0.02
    assert cnn(torch.rand(2, 1, 60, 60)).shape == (2, 10)
