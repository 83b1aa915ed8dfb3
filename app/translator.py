"""Text in, translations and attention out: tokenisation plus the decoders, for one loaded model.

Used by evaluation and by the web service alike; knows nothing of either."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from app.decoding import DecodeOutput, Hypothesis, beam_search, greedy_decode, score_targets
from app.nn.config import EOS_ID
from app.repository import LoadedModel

DEFAULT_LENGTH_PENALTY = 0.6  # GNMT's alpha; models tuned on validation data carry their own
DEFAULT_COVERAGE_PENALTY = 0.0  # GNMT's beta: off unless a model's card carries a tuned one


@dataclass
class Translation:
    """One sentence: ids (source ends with EOS), the detokenised output and the hypothesis with
    its attention ``(L, H, query, key)`` per kind, and the source text as given."""

    source_ids: list[int]
    target_ids: list[int]
    text: str
    hypothesis: Hypothesis
    source_text: str = ""


class Translator:
    def __init__(self, loaded: LoadedModel, max_source_tokens: int = 200) -> None:
        self.loaded = loaded
        self.max_source_tokens = max_source_tokens
        # Beam search's length penalty: the one tuned on validation data, saved in the card.
        decoding = loaded.card.get("decoding") or {}
        self.length_penalty = float(decoding.get("length_penalty", DEFAULT_LENGTH_PENALTY))
        self.coverage_penalty = float(decoding.get("coverage_penalty", DEFAULT_COVERAGE_PENALTY))

    @property
    def device(self) -> torch.device:
        return self.loaded.model.device

    def source_ids(self, text: str) -> list[int]:
        """Subword ids of ``text`` plus EOS; ValueError if empty or too long."""
        ids = self.loaded.tokenizer.encode(text)
        if not ids:
            raise ValueError("text has no tokens")
        if len(ids) > self.max_source_tokens:
            raise ValueError(f"text has {len(ids)} tokens; the limit is {self.max_source_tokens}")
        return ids + [EOS_ID]

    def target_ids(self, text: str) -> list[int]:
        """Subword ids of a target-side text (no EOS), e.g. a decoding prefix; ValueError if too
        long. The vocabulary is shared, so the same tokenizer encodes it."""
        ids = self.loaded.tokenizer.encode(text)
        if len(ids) > self.max_source_tokens:
            raise ValueError(f"target has {len(ids)} tokens; the limit is {self.max_source_tokens}")
        return ids

    def _pad(self, rows: list[list[int]]) -> Tensor:
        """Right-pad id lists into a (B, S) tensor on the model's device."""
        width = max(len(r) for r in rows)
        pad = self.loaded.config.pad_id
        return torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=self.device)

    def _finish(self, texts: list[str], sources: list[list[int]], out: DecodeOutput) -> list[Translation]:
        tok = self.loaded.tokenizer
        return [
            Translation(src, hyp.tokens, tok.decode(hyp.tokens), hyp, source_text=text)
            for text, src, hyp in zip(texts, sources, out.hypotheses(), strict=True)
        ]

    @torch.inference_mode()
    def translate(
        self,
        texts: list[str],
        *,
        beam_size: int = 5,
        max_length: int | Sequence[int] | None = None,
        need_weights: bool = True,
        alpha: float | None = None,
        prefixes: list[list[int]] | None = None,
        coverage_penalty: float | None = None,
        return_tree: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ) -> list[Translation]:
        """Translate a batch; ``beam_size == 1`` is greedy decoding (beam search of size 1 when
        the tree is asked for: the same result). ``alpha`` is the length penalty and
        ``coverage_penalty`` GNMT's beta (defaults: this model's tuned ones, from its card);
        ``prefixes`` are target ids each translation is forced to begin with (see
        :meth:`target_ids`); ``return_tree`` adds the beam tree to each hypothesis. ``max_length``
        may give each text its own budget; ``should_stop`` is asked before every decoder step
        (True raises DecodeStopped)."""
        sources = [self.source_ids(t) for t in texts]
        src = self._pad(sources)
        model = self.loaded.model
        if beam_size == 1 and not return_tree:
            out = greedy_decode(
                model,
                src,
                need_weights=need_weights,
                max_length=max_length,
                prefix=prefixes,
                should_stop=should_stop,
            )
        else:
            out = beam_search(
                model,
                src,
                beam_size=beam_size,
                alpha=self.length_penalty if alpha is None else alpha,
                need_weights=need_weights,
                max_length=max_length,
                prefix=prefixes,
                coverage_penalty=self._coverage(coverage_penalty),
                return_tree=return_tree,
                should_stop=should_stop,
            )
        return self._finish(texts, sources, out)

    def _coverage(self, beta: float | None) -> float:
        """The coverage penalty to use: the one asked for, else the card's (ignored, as for
        beam size 1, by models without cross-attention)."""
        if beta is not None:
            return beta
        return self.coverage_penalty if "cross" in self.loaded.config.attention_kinds else 0.0

    @torch.inference_mode()
    def align(self, texts: list[str], targets: list[str]) -> list[Translation]:
        """Teacher-forced: score each given target (plus EOS) and return its attention."""
        sources = [self.source_ids(t) for t in texts]
        tgt_rows = []
        for target in targets:
            ids = self.loaded.tokenizer.encode(target)
            if len(ids) > self.max_source_tokens:
                raise ValueError(f"target has {len(ids)} tokens; the limit is {self.max_source_tokens}")
            tgt_rows.append(ids + [EOS_ID])
        out = score_targets(self.loaded.model, self._pad(sources), self._pad(tgt_rows))
        return self._finish(texts, sources, out)
