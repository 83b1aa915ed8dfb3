"""The service's part for head options: check ``disable_heads`` and ``alignment`` against the
model (422 naming the field), decode with those heads off, and add the hard word alignment."""

from __future__ import annotations

from collections.abc import Sequence

from attnscope.alignment.hard import Choice, Side, hard_alignment, trained_rows, word_level_attention
from attnscope.alignment.rows import Rows
from attnscope.nn.ablation import HeadTuple, attention_module
from attnscope.serving.errors import InvalidInput
from attnscope.serving.heads import AlignmentChoice, CrossHead, HeadRef, WordAlignment
from attnscope.serving.registry import ServedModel
from attnscope.translator import Translation


def _check_head(served: ServedModel, kind: str, layer: int, head: int, loc: tuple[str | int, ...]) -> None:
    try:
        attention_module(served.loaded.model, kind, layer)
    except ValueError as err:
        raise InvalidInput(loc, f"{err} ({served.loaded.id})") from None
    heads = served.loaded.config.num_heads
    if head >= heads:
        raise InvalidInput(loc, f"no head {head}: {served.loaded.id} has {heads} heads per layer")


def check_disabled(served: ServedModel, heads: Sequence[HeadRef]) -> list[HeadTuple]:
    """The heads as ``(kind, layer, head)``; InvalidInput for one the model does not have."""
    for i, h in enumerate(heads):
        _check_head(served, h.kind, h.layer, h.head, ("body", "disable_heads", i))
    return [(h.kind, h.layer, h.head) for h in heads]


def check_alignment(served: ServedModel, choice: AlignmentChoice | None) -> tuple[Choice, Rows] | None:
    """The requested head (or "average") and its row convention (the request's, else the one the
    head was trained on); None without a request; InvalidInput for a head the model lacks."""
    if choice is None:
        return None
    if "cross" not in served.loaded.config.attention_kinds:
        raise InvalidInput(("body", "alignment"), f"{served.loaded.id} has no cross-attention to align with")
    if choice == "average":
        return "average", "produces"
    assert isinstance(choice, CrossHead)
    _check_head(served, "cross", choice.layer, choice.head, ("body", "alignment"))
    head = (choice.layer, choice.head)
    return head, choice.rows or trained_rows(served.loaded.card, head)


def word_alignment(served: ServedModel, result: Translation, choice: tuple[Choice, Rows] | None,
                   source: str, target: str) -> WordAlignment | None:
    """The hard word alignment of the result's cross-attention (None without a choice)."""
    if choice is None or result.hypothesis.cross is None:
        return None
    loaded, (which, rows) = served.loaded, choice
    hard = hard_alignment(word_level_attention(
        loaded.tokenizer, source=Side(source, result.source_ids, loaded.source_lang),
        target=Side(target, result.target_ids, loaded.target_lang), cross=result.hypothesis.cross, choice=which, rows=rows,
    ))
    head: CrossHead | str = (
        "average" if which == "average" else CrossHead(kind="cross", layer=which[0], head=which[1], rows=rows)
    )
    return WordAlignment(
        pharaoh=hard.pharaoh, source_words=hard.source_words, target_words=hard.target_words, head=head  # type: ignore[arg-type]
    )
