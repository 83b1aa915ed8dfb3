"""Which decoder step's attention row aligns a target word (see attnscope.alignment.heads): the step
that *produces* it, or the next one, which *reads* it. Torch-free, so the CLI's parser and the
API's schemas can name the choices without loading a model stack."""

from __future__ import annotations

from typing import Literal

Rows = Literal["produces", "reads"]
ROWS: tuple[Rows, ...] = ("produces", "reads")
