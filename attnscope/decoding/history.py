"""The attention rows a decoder computed, step by step, kept unpadded until the end.

Both decoders drop finished sentences (and beam search its pruned hypotheses) from the batch, so
step ``t`` has its own number of rows ``N_t``. Each step stores exactly what the model returned:
cross rows ``(N_t, L, H, S)`` and decoder self-attention rows ``(N_t, L, H, t + 1)``: memory grows
linearly with the output length (the self-attention rows are the output matrix itself), and no
step copies earlier ones. A hypothesis is a path: the row it occupied at each step. Only the
returned paths are gathered, once, into the padded batch tensors ``(B, L, H, T, key)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnscope.nn.outputs import StepOutput


class AttentionHistory:
    """Per-step attention rows of the rows alive at that step."""

    def __init__(self) -> None:
        self.cross: list[Tensor] = []  # step t: (N_t, L, H, S)
        self.decoder_self: list[Tensor] = []  # step t: (N_t, L, H, t + 1)

    def record(self, step: StepOutput) -> None:
        if step.cross is not None:
            self.cross.append(step.cross)
        if step.decoder_self is not None:
            self.decoder_self.append(step.decoder_self)

    def stored_elements(self) -> int:
        """How many attention weights are held (for the memory tests)."""
        return sum(t.numel() for t in self.cross) + sum(t.numel() for t in self.decoder_self)

    def gather(self, paths: list[list[int]]) -> tuple[Tensor | None, Tensor | None]:
        """paths[b][t]: the row sentence ``b``'s returned hypothesis occupied at step ``t``.

        Returns cross (B, L, H, T, S) and decoder_self (B, L, H, T, T), zero-padded, T the longest
        path (None for a kind the model did not return)."""
        length = max(len(p) for p in paths)
        return self._gather(self.cross, paths, length, None), self._gather(
            self.decoder_self, paths, length, length
        )

    @staticmethod
    def _gather(
        steps: list[Tensor], paths: list[list[int]], length: int, width: int | None
    ) -> Tensor | None:
        if not steps:
            return None
        first = steps[0]
        n_layers, n_heads = first.shape[1:3]
        keys = width if width is not None else first.size(-1)
        out = first.new_zeros(len(paths), n_layers, n_heads, length, keys)
        for t in range(length):
            sentences = [b for b, p in enumerate(paths) if len(p) > t]
            if not sentences:
                break
            picked = [paths[b][t] for b in sentences]
            n, k = len(sentences), steps[t].size(-1)
            if sentences[-1] == n - 1 and picked == sentences:  # rows 0..n-1 are sentences 0..n-1
                out[:n, :, :, t, :k] = steps[t][:n]  # (e.g. greedy at batch 1): a slice copy
                continue
            row = steps[t].index_select(0, torch.tensor(picked, device=first.device))  # (n, L, H, k)
            out[sentences, :, :, t, :k] = row
        return out


def last_layer_cross(cross: Tensor) -> Tensor:
    """cross: (N, L, H, S) one step's rows -> (N, S) the last layer's rows averaged over heads:
    the alignment the coverage penalty accumulates (for an RNN, L = H = 1: its only row)."""
    return cross[:, -1].mean(dim=1)


def gnmt_coverage(coverage: Tensor, source_mask: Tensor, beta: float) -> Tensor:
    """GNMT's coverage penalty (Wu et al. 2016, eq. 14) ``beta * sum_i log(min(sum_j a_ij, 1))``.

    coverage: (N, S) the attention each source position has received so far, summed over the
    target steps; source_mask: (N, S) True for real positions (padding takes no part). A position
    never attended would give log 0 = -inf; it is floored at 1e-6 (log = -13.8), so hypotheses
    that each miss something can still be ranked. Returns (N,), zero when every position got a
    total weight of at least one, negative otherwise."""
    clipped = coverage.clamp(min=1e-6, max=1.0).log().masked_fill(~source_mask, 0.0)
    return beta * clipped.sum(-1)
