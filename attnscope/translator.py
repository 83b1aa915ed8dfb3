"""Text in, translations and attention out: tokenisation plus the decoders, for one loaded model.

Used by evaluation and by the web service alike; knows nothing of either."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Unpack

import torch
from torch import Tensor

from attnscope.alignment.hard import Choice, Side, WordAttention, word_level_attention
from attnscope.decoding import DecodeOutput, Hypothesis, beam_search, greedy_decode, score_targets
from attnscope.decoding.plan import DecodeKw, DecodeOptions, make_plan, options_of
from attnscope.decoding.steps import StepCallback
from attnscope.nn.config import EOS_ID
from attnscope.repository import LoadedModel
from attnscope.text import protect
from attnscope.text.interface import NO_LANGUAGE_CODES

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


@dataclass
class ProtectedTranslation:
    """A translation with protected spans put back: ``translation`` is the final text scored on
    the original source (or the plain translation when nothing was protected); ``placements``
    says where each span went."""

    translation: Translation
    placements: list[protect.Placement]


def _budgets(options: DecodeOptions, keep: list[int]) -> DecodeOptions:
    """``options`` for the texts at ``keep`` of a batch: their own budgets where each had one."""
    budget = options.max_length
    if budget is None or isinstance(budget, int):
        return options
    return replace(options, max_length=[budget[i] for i in keep])


def _sentences_with(results: list[Translation]) -> Counter[str]:
    """In how many of ``results`` each (lowercased) word occurs."""
    counts: Counter[str] = Counter()
    for result in results:
        counts.update({w.lower() for w in re.findall(r"\w+", result.text)})
    return counts


class Translator:
    def __init__(self, loaded: LoadedModel, max_source_tokens: int = 200) -> None:
        self.loaded = loaded
        self.max_source_tokens = max_source_tokens
        # Beam search's length penalty: the one tuned on validation data, saved in the card.
        decoding = loaded.card.get("decoding") or {}
        self.length_penalty = float(decoding.get("length_penalty", DEFAULT_LENGTH_PENALTY))
        self.coverage_penalty = float(decoding.get("coverage_penalty", DEFAULT_COVERAGE_PENALTY))
        self._placeholders: dict[str, set[str]] | None = None

    @property
    def protects_by_default(self) -> bool:
        """Whether requests that do not say go through placeholders (``translate_protected``):
        the card's ``decoding.protect`` where it has one, else every model with cross-attention
        (measured in bench/entities.py: the shipped models keep every number, name and emoji of
        54-55 of 55 real-world sentences that way, against 0-2 translated as they are)."""
        decoding = self.loaded.card.get("decoding") or {}
        if isinstance(decoding.get("protect"), bool):
            return bool(decoding["protect"])
        return "cross" in self.loaded.config.attention_kinds

    @property
    def device(self) -> torch.device:
        return self.loaded.model.device

    def for_languages(self, source: str | None, target: str | None) -> Translator:
        """This translator with another source and/or target language code (None: the card's);
        itself when neither is given. ValueError naming the valid codes for a code the model
        does not know, or saying the model has none (M2M100, NLLB and mBART imports have them)."""
        if source is None and target is None:
            return self
        tok = self.loaded.tokenizer
        if not tok.language_codes():
            raise ValueError(NO_LANGUAGE_CODES)
        clone = copy.copy(self)
        clone.loaded = dataclasses.replace(self.loaded, tokenizer=tok.for_languages(source, target))
        return clone

    def source_ids(self, text: str) -> list[int]:
        """Subword ids of ``text`` plus EOS (after a multilingual model's source language code,
        which counts towards the limit); ValueError if empty or too long."""
        tok = self.loaded.tokenizer
        ids = tok.encode(text)
        if not ids:
            raise ValueError("text has no tokens")
        ids = tok.source_prefix_ids() + ids
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
        options: DecodeOptions | None = None,
        *,
        should_stop: Callable[[], bool] | None = None,
        on_step: StepCallback | None = None,
        **keywords: Unpack[DecodeKw],
    ) -> list[Translation]:
        """Translate a batch with ``options`` (or the same by keyword,
        :class:`~attnscope.decoding.plan.DecodeOptions`): ``beam_size == 1`` is greedy decoding (beam
        search of size 1 when the tree is asked for: the same result); ``alpha`` (the length
        penalty) and ``coverage_penalty`` (GNMT's beta) default to this model's tuned ones, from
        its card; ``prefix`` gives target ids each translation is forced to begin with (see
        :meth:`target_ids`); ``return_tree`` adds the beam tree to each hypothesis; ``max_length``
        may give each text its own budget. ``should_stop`` is asked before every decoder step
        (True raises DecodeStopped); ``on_step`` hears what each step did
        (:mod:`attnscope.decoding.steps`). Which decoder runs is the plan's choice
        (:func:`~attnscope.decoding.plan.make_plan`)."""
        sources = [self.source_ids(t) for t in texts]
        src = self._pad(sources)
        opts = self.resolve(options_of(options, keywords), len(texts))
        model = self.loaded.model
        plan = make_plan(model, src, opts, streamed=on_step is not None)
        decoder = greedy_decode if plan.search == "greedy" else beam_search
        out = decoder(model, src, opts, plan, should_stop=should_stop, on_step=on_step)
        return self._finish(texts, sources, out)

    def resolve(self, options: DecodeOptions, batch: int) -> DecodeOptions:
        """``options`` with this model's defaults filled in: the card's length and coverage
        penalties where None, and a multilingual model's target language code forced first."""
        forced = self.loaded.tokenizer.target_prefix_ids()
        prefix = options.prefix
        if forced:
            prefix = [forced + list(p) for p in (prefix or [[] for _ in range(batch)])]
        alpha = self.length_penalty if options.alpha is None else options.alpha
        return replace(options, alpha=alpha, coverage_penalty=self._coverage(options.coverage_penalty), prefix=prefix)

    def _coverage(self, beta: float | None) -> float:
        """The coverage penalty to use: the one asked for, else the card's (ignored, as for
        beam size 1, by models without cross-attention)."""
        if beta is not None:
            return beta
        return self.coverage_penalty if "cross" in self.loaded.config.attention_kinds else 0.0

    @torch.inference_mode()
    def translate_protected(
        self,
        texts: list[str],
        options: DecodeOptions | None = None,
        *,
        should_stop: Callable[[], bool] | None = None,
        **keywords: Unpack[DecodeKw],
    ) -> list[ProtectedTranslation]:
        """Translate with numbers, emoji and byte-spelled words copied through placeholders
        (``attnscope.text.protect``): the model translates each text with those spans replaced, they
        are put back where its cross-attention places them, and the result is scored
        teacher-forced on the original source, so the returned attention is the model's while
        reading the text shown. A text that is nothing but such spans ("🍕🍕🍕", "42", a bare
        URL) is copied through as it is (every span ``copied``), scored the same way. Texts
        without such spans, and models without cross-attention, are translated as they are
        (``placements`` empty); so is one whose restored output would pass the token limit."""
        masked = [protect.Masked(t, t) for t in texts]
        if "cross" in self.loaded.config.attention_kinds:
            masked = [protect.mask(t, self.spans(t)) for t in texts]
        # The spans are placed by the cross-attention: the search records it, with no prefix or tree.
        opts = replace(options_of(options, keywords), need_weights=True, prefix=None, return_tree=False)
        copied = {i for i, m in enumerate(masked) if protect.nothing_to_translate(m)}
        to_decode = [i for i in range(len(texts)) if i not in copied]
        decoded = dict(zip(to_decode, self.translate(
            [masked[i].text for i in to_decode], _budgets(opts, to_decode), should_stop=should_stop,
        ) if to_decode else [], strict=True))  # fmt: skip
        results: dict[int, ProtectedTranslation] = {}
        restored: dict[int, tuple[str, list[protect.Placement]]] = {}
        for i, m in enumerate(masked):
            if i in copied:
                restored[i] = protect.copy_through(m)
                continue
            results[i] = ProtectedTranslation(decoded[i], [])
            if not m.spans:
                continue
            text, placements = self._restore(m, decoded[i])
            if len(self.loaded.tokenizer.encode(text)) <= self.max_source_tokens:
                restored[i] = (text, placements)
            else:  # too long to score once restored: translate the text as given
                (plain,) = self.translate([texts[i]], _budgets(opts, [i]), should_stop=should_stop)
                results[i] = ProtectedTranslation(plain, [])
        if restored:
            scored = self.align([texts[i] for i in restored], [text for text, _ in restored.values()])
            for (i, (text, placements)), translation in zip(restored.items(), scored, strict=True):
                # The text as restored: an older tokenizer without byte fallback would decode
                # an emoji it cannot spell as ⁇; the ids and attention are the model's.
                translation.text = text
                results[i] = ProtectedTranslation(translation, placements)
        return [results[i] for i in range(len(texts))]

    def spans(self, text: str) -> list[protect.FoundSpan]:
        """What ``translate_protected`` copies through in ``text`` (``attnscope.text.spans``)."""
        return protect.find_spans(text, self._spelled_in_bytes, self._pieces)

    def _spelled_in_bytes(self, word: str) -> bool:
        tok = self.loaded.tokenizer
        return any(p.startswith("<0x") or p == "<unk>" for p in tok.pieces(tok.encode(word)))

    def _pieces(self, word: str) -> int:
        """How many subword pieces ``word`` takes, a bare word-start marker not counted."""
        tok = self.loaded.tokenizer
        return sum(p != "▁" for p in tok.pieces(tok.encode(word)))

    def _alignment_choice(self) -> Choice:
        """The card's best-aligning cross head when it beats the average of all heads."""
        card = self.loaded.card.get("alignment") or {}
        best, average = card.get("best_head") or {}, card.get("average_of_heads") or {}
        if best and float(best.get("f1", 0)) > float(average.get("f1", 1)):
            return (int(best["layer"]), int(best["head"]))
        return "average"

    def placeholder_translations(self) -> dict[str, set[str]]:
        """Per kind, the lowercased words this model translates its placeholder word to, learnt
        once (cached) from a few short sentences with the placeholder (``PLACEHOLDER_CONTEXTS``)
        and the same with another word of its kind (``CONTROLS``)."""
        if self._placeholders is None:
            learnt: dict[str, set[str]] = {}
            for kind, word in protect.PLACEHOLDERS.items():
                contexts = [c.format(word) for c in protect.PLACEHOLDER_CONTEXTS[kind]]
                seen: Counter[str] = Counter()
                results = self.translate(contexts, beam_size=1)
                for context, result in zip(contexts, results, strict=True):
                    words = self._word_attention(context, result)
                    assert words.matrix is not None
                    if words.target_words:
                        k = words.source_words.index(word)
                        found = words.target_words[int(words.matrix[:, k].argmax())]
                        if any(c.isalnum() for c in found):
                            seen[found.lower()] += 1
                # Kept when two sentences agree (one sentence's stray link is not a translation)
                # and the word is not in two of the same sentences with another word of the kind
                # in its place: an RNN's "Ein" for "Obama is running." translates the sentence.
                others = [c.format(protect.CONTROLS[kind]) for c in protect.PLACEHOLDER_CONTEXTS[kind]]
                around = _sentences_with(self.translate(others, beam_size=1))
                learnt[kind] = {word.lower()} | {w for w, n in seen.items() if n >= 2 and around[w] < 2}
                # Also kept: a word in two more of the sentences than with the other word (an
                # RNN's "zwei" where attention links "two" to a neighbour).
                learnt[kind] |= {w for w, n in _sentences_with(results).items() if n - around[w] >= 2}
            self._placeholders = learnt
        return self._placeholders

    def _word_attention(self, source: str, result: Translation) -> WordAttention:
        """``result``'s cross-attention merged to the words of ``source`` (the text it translated)
        and of its output, through the alignment head (a zero matrix when there is nothing to
        merge)."""
        assert result.hypothesis.cross is not None  # only models with cross-attention get here
        words = word_level_attention(
            self.loaded.tokenizer, source=Side(source, result.source_ids, self.loaded.source_lang),
            target=Side(result.text, result.target_ids, self.loaded.target_lang), cross=result.hypothesis.cross,
            choice=self._alignment_choice(),
        )  # fmt: skip
        if words.matrix is None:
            words.matrix = torch.zeros(len(words.target_spans), len(words.source_spans))
        return words

    def _restore(self, masked: protect.Masked, result: Translation) -> tuple[str, list[protect.Placement]]:
        words = self._word_attention(masked.text, result)
        assert words.matrix is not None
        return protect.restore(
            masked,
            result.text,
            source_words=words.source_spans,
            target_words=words.target_spans,
            word_attention=words.matrix,
            placeholder_translations=self.placeholder_translations(),
        )

    @torch.inference_mode()
    def align(self, texts: list[str], targets: list[str]) -> list[Translation]:
        """Teacher-forced: score each given target (plus EOS) and return its attention."""
        sources = [self.source_ids(t) for t in texts]
        tgt_rows = []
        for target in targets:
            ids = self.loaded.tokenizer.encode(target)
            if len(ids) > self.max_source_tokens:
                raise ValueError(f"target has {len(ids)} tokens; the limit is {self.max_source_tokens}")
            tgt_rows.append(self.loaded.tokenizer.target_prefix_ids() + ids + [EOS_ID])
        out = score_targets(self.loaded.model, self._pad(sources), self._pad(tgt_rows))
        return self._finish(texts, sources, out)
