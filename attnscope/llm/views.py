"""The views of a decoder-only model's attention, shaped like an encoder-decoder's.

A decoder-only model has one causal matrix per layer and query head over the inputs it ran
(prompt + output but the last token). Output token t was chosen by the query at position
``prompt - 1 + t`` (the last prompt token plays the encoder-decoder's BOS), so with the source
at prompt tokens [s0, s1):

* ``target_source`` (L, H, T, S): rows ``prompt-1 .. prompt+T-2``, columns s0..s1 (the
  "cross-attention");
* ``source_source`` (L, H, S, S): rows and columns s0..s1;
* ``target_target`` (L, H, T, T): the output rows over the keys last-prompt-token + output
  (an encoder-decoder's decoder self-attention over BOS + output);
* ``full`` (L, H, n, n): the whole causal matrix;
* ``outside_source`` (L, H, T): each output row's attention mass outside the source
  (instruction, the first token's "attention sink", its own output).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

VIEWS: tuple[str, ...] = ("target_source", "source_source", "target_target", "full")


@dataclass
class Views:
    """The views of one answer (see the module docstring); ``first_target_row`` = prompt - 1."""

    target_source: Tensor
    source_source: Tensor
    target_target: Tensor
    full: Tensor
    outside_source: Tensor
    first_target_row: int

    def sizes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(getattr(self, name).shape) for name in (*VIEWS, "outside_source")}


def cut(full: Tensor, prompt_length: int, span: tuple[int, int]) -> Views:
    """The views of ``full`` (L, H, n, n) for a prompt of ``prompt_length`` tokens whose source
    lies at tokens ``span``; the output has n - prompt_length + 1 tokens."""
    s0, s1 = span
    first = prompt_length - 1
    outputs = full.size(-1) - first
    target_source = full[:, :, first : first + outputs, s0:s1]
    return Views(
        target_source=target_source,
        source_source=full[:, :, s0:s1, s0:s1],
        target_target=full[:, :, first:, first:],
        full=full,
        outside_source=1.0 - target_source.sum(-1),
        first_target_row=first,
    )


def floats(layers: int, heads: int, *, prompt: int, output: int, source: int, views: tuple[str, ...]) -> int:
    """Attention floats an answer with ``views`` carries (before it is decoded: ``output`` is
    the budget): layers × query heads × the positions of each view, plus the outside mass."""
    n = prompt + output - 1
    per = {"target_source": output * source, "source_source": source * source, "target_target": output * output,
           "full": n * n}  # fmt: skip
    return layers * heads * (sum(per[v] for v in views) + output)
