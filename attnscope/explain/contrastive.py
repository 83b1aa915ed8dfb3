"""Contrastive attribution (Yin & Neubig 2022, "Interpreting Language Models with Contrastive
Explanations"): why did the model write its token y_t at position t *rather than* a foil token?

The function attributed is the difference f = log p(y_t | y_<t, x) − log p(foil | y_<t, x) (the
softmax normaliser cancels: it is the logit difference), teacher-forced on the given target, to
the source token embeddings x, with the two gradient methods of :mod:`attnscope.attribution`:
input × gradient, and integrated gradients from the all-<pad> (zero) source. A source token
with a large share is one that makes the model prefer y_t over the foil.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnscope.attribution import _scaled_source, ig_path
from attnscope.nn.base import Seq2Seq


@dataclass(frozen=True)
class Contrast:
    """input_x_gradient, integrated_gradients: (S,) raw attributions of f to each source token
    (``</s>`` included); f, f_baseline: the difference at x and at the zero baseline."""

    input_x_gradient: Tensor
    integrated_gradients: Tensor
    f: float
    f_baseline: float

    @property
    def completeness_gap(self) -> float:
        """Σ_s IG[s] − (f(x) − f(baseline)): ~0 when the integral is accurate."""
        return float(self.integrated_gradients.sum()) - (self.f - self.f_baseline)


def contrastive(
    model: Seq2Seq, source_ids: list[int], target_ids: list[int], *, position: int, foil: int, steps: int = 16
) -> Contrast:
    """Attribute log p(target_ids[position]) − log p(foil) at ``position`` (ids with their EOS;
    0 <= position < len(target_ids)); ``steps`` trapezoid intervals for integrated gradients."""
    if not 0 <= position < len(target_ids):
        raise ValueError(f"position {position} is outside the target's {len(target_ids)} tokens")
    if steps < 1:
        raise ValueError("integrated gradients need at least one step")
    with torch.inference_mode(False), torch.enable_grad():
        return _contrast(model, source_ids, target_ids, position, foil, steps)


def _contrast(model: Seq2Seq, source_ids: list[int], target_ids: list[int], position: int, foil: int, steps: int) -> Contrast:
    device = model.device
    alphas, src, weights = ig_path(source_ids, steps, device)
    prefix = [model.config.bos_id, *target_ids[:position]]
    tgt_in = torch.tensor([prefix], device=device).expand(steps + 1, -1)  # (m+1, position + 1)
    was_training = model.training
    model.eval()
    store: dict[str, Tensor] = {}
    with _scaled_source(model, src, alphas, store):
        logits = model(src, tgt_in).logits[:, -1].float()  # (m+1, V) the step that writes position
        f = logits[:, target_ids[position]] - logits[:, foil]  # (m+1,)
        (grad,) = torch.autograd.grad(f.sum(), store["z"])
        integrand = (grad * store["x"]).sum(-1)  # (m+1, S)
    model.train(was_training)
    return Contrast(
        input_x_gradient=integrand[-1].detach(),
        integrated_gradients=(weights[:, None] * integrand).sum(0).detach(),
        f=float(f[-1].detach()),
        f_baseline=float(f[0].detach()),
    )
