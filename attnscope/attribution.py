"""Gradient attribution of each target token to each source token, beside attention
("Attention is not Explanation", Jain & Wallace 2019).

The function attributed is ``f_t = log p(y_t | y_<t, x)``, the teacher-forced log-probability of
target token ``t``; the input is the source token embeddings ``x`` (S, D) (positions, for the
Transformer, are added after and not attributed). Two methods, both with ``torch.autograd``:

- input × gradient: ``a[t, s] = Σ_d x[s, d] · ∂f_t/∂x[s, d]``;
- integrated gradients (Sundararajan et al. 2017) from the baseline ``x' = 0`` (every source
  embedding replaced by ``<pad>``'s, which is zero): ``a[t, s] = Σ_d x[s, d] · ∫_0^1 ∂f_t/∂x(αx)[s, d] dα``,
  the integral by the trapezoidal rule over ``steps`` intervals; they satisfy completeness,
  ``Σ_s a[t, s] ≈ f_t(x) − f_t(0)``.

For display each row is normalised, ``|a[t, s]| / Σ_s |a[t, s]|``, so it reads like an attention row;
the rank correlation with each attention head is Spearman's ρ per target row, averaged over rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnscope.decoding.output import DecodeStopped
from attnscope.nn.base import Seq2Seq


@dataclass
class Attribution:
    """Raw attributions (T, S) target x source tokens (``</s>`` included on both sides), the
    function values f(x) and f(baseline) (T,), and how far IG's rows miss completeness."""

    input_x_gradient: Tensor
    integrated_gradients: Tensor
    f: Tensor
    f_baseline: Tensor

    @property
    def completeness_gap(self) -> Tensor:
        """(T,) Σ_s IG[t, s] − (f_t(x) − f_t(baseline)): ~0 when the integral is accurate."""
        return self.integrated_gradients.sum(-1) - (self.f - self.f_baseline)


@contextmanager
def _scaled_source(model: Seq2Seq, src: Tensor, alphas: Tensor, store: dict[str, Tensor]) -> Iterator[None]:
    """While active, the embedding ``x`` of ``src`` (that tensor object) comes out as the leaf
    ``z = alpha_b · x`` for batch row ``b``; ``store`` keeps ``x`` and ``z``."""
    embed: nn.Module = model.embed  # type: ignore[assignment]

    def hook(_module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> Tensor | None:
        if inputs[0] is not src:
            return None
        store["x"] = output.detach()  # (B, S, D) the embeddings
        z = (output.detach() * alphas.view(-1, 1, 1)).requires_grad_(True)  # the path point αx
        store["z"] = z
        return z

    handle = embed.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _log_probs(model: Seq2Seq, src: Tensor, tgt: Tensor) -> Tensor:
    """(B, T) log p of each ``tgt`` token, teacher-forced (tgt ends with EOS, no padding)."""
    bos = torch.full_like(tgt[:, :1], model.config.bos_id)
    logits = model(src, torch.cat([bos, tgt[:, :-1]], 1)).logits.float()  # (B, T, V)
    return torch.log_softmax(logits, -1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)


def attribute(
    model: Seq2Seq,
    source_ids: list[int],
    target_ids: list[int],
    *,
    steps: int = 32,
    should_stop: Callable[[], bool] | None = None,
) -> Attribution:
    """Attributions of one sentence pair (ids with their final EOS). ``steps`` trapezoid
    intervals for integrated gradients (``steps + 1`` points, evaluated as one batch).
    ``should_stop`` is asked before each target token's backward pass: True raises
    :class:`~attnscope.decoding.DecodeStopped` (a deadline passed, the client left)."""
    if steps < 1:
        raise ValueError("integrated gradients need at least one step")
    # Decoding runs under torch.inference_mode(); gradients need every tensor made outside it.
    with torch.inference_mode(False), torch.enable_grad():
        return _attribute(model, source_ids, target_ids, steps, should_stop or (lambda: False))


def ig_path(source_ids: list[int], steps: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Integrated gradients' straight path from the zero baseline in ``steps`` intervals: the
    points ``alphas`` (m+1,), the source repeated once per point (m+1, S) and the trapezoid
    rule's weights (m+1,)."""
    alphas = torch.linspace(0.0, 1.0, steps + 1, device=device)  # (m+1,)
    src = torch.tensor([source_ids], device=device).expand(steps + 1, -1).contiguous()  # (m+1, S)
    weights = torch.full_like(alphas, 1.0 / steps)
    weights[0] = weights[-1] = 0.5 / steps  # trapezoid
    return alphas, src, weights


def _attribute(
    model: Seq2Seq, source_ids: list[int], target_ids: list[int], steps: int, should_stop: Callable[[], bool]
) -> Attribution:
    device = model.device
    alphas, src, weights = ig_path(source_ids, steps, device)
    tgt = torch.tensor([target_ids], device=device).expand(steps + 1, -1)  # (m+1, T)
    was_training = model.training
    model.eval()
    store: dict[str, Tensor] = {}
    with _scaled_source(model, src, alphas, store):
        f = _log_probs(model, src, tgt)  # (m+1, T)
        try:
            return along_path(f, store["x"], store["z"], weights, should_stop)
        finally:
            model.train(was_training)


def along_path(f: Tensor, x: Tensor, z: Tensor, weights: Tensor, should_stop: Callable[[], bool]) -> Attribution:
    """Each target token's row from ``f`` (m+1, T), the log-probabilities at the path points
    ``z`` = α·``x`` (m+1, S, D) of the source embeddings ``x``: x · ∇f(αx) at α = 1 (input ×
    gradient) and its trapezoid over α with ``weights`` (integrated gradients). DecodeStopped
    when ``should_stop()`` between tokens."""
    rows_ig, rows_ixg = [], []
    for t in range(f.size(1)):
        if should_stop():
            raise DecodeStopped
        (grad,) = torch.autograd.grad(f[:, t].sum(), z, retain_graph=t + 1 < f.size(1))  # ∇f(αx)
        integrand = (grad * x).sum(-1)  # (m+1, S) x · ∇f(αx)
        rows_ig.append((weights[:, None] * integrand).sum(0))  # trapezoid over α
        rows_ixg.append(integrand[-1])  # α = 1: x · ∇f(x)
    return Attribution(
        input_x_gradient=torch.stack(rows_ixg).detach(),
        integrated_gradients=torch.stack(rows_ig).detach(),
        f=f[-1].detach(),
        f_baseline=f[0].detach(),
    )


def normalise_rows(a: Tensor) -> Tensor:
    """(T, S) -> |a| / Σ_s |a| per row (a zero row stays zero)."""
    mag = a.abs()
    return mag / mag.sum(-1, keepdim=True).clamp(min=1e-12)


def _ranks(x: Tensor) -> Tensor:
    """(..., S) average ranks (ties share their mean rank)."""
    order = x.argsort(-1)
    ranks = torch.empty_like(x)
    ranks.scatter_(-1, order, torch.arange(x.size(-1), dtype=x.dtype, device=x.device).expand_as(x).contiguous())
    # ties: average the ranks of equal values
    eq = x.unsqueeze(-1) == x.unsqueeze(-2)  # (..., S, S)
    return (eq.to(x.dtype) @ ranks.unsqueeze(-1)).squeeze(-1) / eq.sum(-1).to(x.dtype)


def spearman_rows(a: Tensor, b: Tensor) -> float | None:
    """Mean over rows of Spearman's ρ between (T, S) ``a`` and ``b``; rows where either is
    constant are skipped (None if all are)."""
    ra, rb = _ranks(a.double()), _ranks(b.double())
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    denom = (ra.norm(dim=-1) * rb.norm(dim=-1))
    ok = denom > 1e-12
    if not bool(ok.any()):
        return None
    return float(((ra * rb).sum(-1)[ok] / denom[ok]).mean())


def correlations(attribution: Tensor, cross: Tensor) -> list[list[float | None]]:
    """attribution: (T, S); cross: (L, H, T, S) -> [layer][head] mean row Spearman ρ."""
    return [[spearman_rows(attribution, cross[la, h].float()) for h in range(cross.size(1))] for la in range(cross.size(0))]


def summary(attr: Attribution, cross: Tensor | None) -> dict[str, Any]:
    """JSON-ready: normalised rows of both methods, completeness, and per-head correlations."""
    ixg, ig = normalise_rows(attr.input_x_gradient), normalise_rows(attr.integrated_gradients)
    out: dict[str, Any] = {
        "input_x_gradient": ixg,
        "integrated_gradients": ig,
        "correlation": None,
    }
    if cross is not None:
        out["correlation"] = {
            "input_x_gradient": correlations(ixg, cross),
            "integrated_gradients": correlations(ig, cross),
        }
    return out
