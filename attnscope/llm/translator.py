"""Text in, a translation and its attention out, for one loaded decoder-only model.

The prompt is the card's template (or the request's own) filled with the source; the model
decodes after it (:mod:`attnscope.llm.search`); the answer names exactly what ran (prompt text,
its tokens and ids, the source's token span, the output ids) and cuts the one causal matrix into
the views an encoder-decoder has (:mod:`attnscope.llm.views`).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from attnscope.llm.folder import LoadedLLM
from attnscope.llm.prompt import FilledPrompt, PromptError, fill, token_span
from attnscope.llm.search import Generation, LLMOptions, StepHook, generate
from attnscope.llm.views import Views, cut
from attnscope.nn.ablation import disabled_heads


@dataclass
class Prompt:
    """A filled prompt tokenised: ids, tokens as text, and the source's [start, end) in tokens."""

    filled: FilledPrompt
    ids: list[int]
    tokens: list[str]
    source_span: tuple[int, int]


@dataclass
class LLMTranslation:
    """One translation: what ran, what came out, and its views (None without attention)."""

    prompt: Prompt
    target_ids: list[int]
    target_tokens: list[str]
    text: str
    generation: Generation
    views: Views | None
    forced_tokens: int = 0  # output tokens a what-if prefix forced (the first ones)


class LLMTranslator:
    """Translate with one loaded decoder-only model (no web, no transformers)."""

    def __init__(self, loaded: LoadedLLM, max_prompt_tokens: int = 1024) -> None:
        self.loaded = loaded
        self.max_prompt_tokens = max_prompt_tokens
        prompt = loaded.card.get("prompt") or {}
        self.template = str(prompt.get("template") or "{source_language}: {source}\n{target_language}:")
        self.add_special_tokens = bool(prompt.get("add_special_tokens", prompt.get("kind") != "chat"))

    def token_texts(self, ids: Iterable[int]) -> list[str]:
        """Each id as a piece in the app's spelling (``▁man``, ``<0xF0>``; the interface's
        :meth:`~attnscope.text.bpe.JsonTokenizer.pieces`), a special token as its own text
        (``<|im_end|>``, not a generic ``</s>``)."""
        tok = self.loaded.tokenizer
        ids = list(ids)
        special = self._special_ids()
        return [(tok.backend.id_to_token(i) or piece) if i in special else piece
                for i, piece in zip(ids, tok.pieces(ids), strict=True)]  # fmt: skip

    def _special_ids(self) -> set[int]:
        added = self.loaded.tokenizer.backend.get_added_tokens_decoder()
        return {int(i) for i, t in added.items() if t.special} | set(self.loaded.config.stop_ids)

    def prompt(self, source: str, template: str | None = None) -> Prompt:
        """The prompt of ``source`` (the card's template unless ``template``); PromptError for a
        template without one ``{source}``, an empty source or a prompt over the token limit."""
        if not source.strip():
            raise PromptError("the text has nothing to translate")
        filled = fill(template or self.template, source, source_lang=self.loaded.source_lang,
                      target_lang=self.loaded.target_lang)  # fmt: skip
        encoding = self.loaded.tokenizer.backend.encode(filled.text, add_special_tokens=self.add_special_tokens)
        ids = list(encoding.ids)
        if len(ids) > self.max_prompt_tokens:
            raise PromptError(f"the prompt has {len(ids)} tokens; the limit is {self.max_prompt_tokens}")
        span = token_span([(int(o[0]), int(o[1])) for o in encoding.offsets], filled.start, filled.end)
        return Prompt(filled, ids, self.token_texts(ids), span)

    def _finish(self, prompt: Prompt, generation: Generation) -> LLMTranslation:
        special = self._special_ids()
        text = self.loaded.tokenizer.decode([t for t in generation.tokens if t not in special]).strip()
        views = cut(generation.attention, len(prompt.ids), prompt.source_span) if generation.attention is not None else None
        return LLMTranslation(prompt, generation.tokens, self.token_texts(generation.tokens), text, generation, views)

    def forced_ids(self, prefix: str | None) -> list[int]:
        """A what-if prefix as output token ids (tokenised alone, as ``align`` tokenises a
        target); [] for none or blank."""
        return self.loaded.tokenizer.encode(prefix) if prefix is not None and prefix.strip() else []

    def translate(
        self, source: str, options: LLMOptions, *, template: str | None = None,
        heads_off: Iterable[tuple[int, int]] = (), prefix: str | None = None, on_step: StepHook | None = None,
    ) -> LLMTranslation:  # fmt: skip
        """Translate ``source`` with ``options``, the (layer, query head) pairs ``heads_off``
        switched off in every pass; the output starts with ``prefix`` (forced, then continued);
        ``on_step`` hears each step the search chooses (greedy and sampling)."""
        prompt = self.prompt(source, template)
        forced = self.forced_ids(prefix)
        off = [("decoder_self", layer, head) for layer, head in heads_off]
        with disabled_heads(self.loaded.model, off) if off else nullcontext():
            generation = generate(self.loaded.model, prompt.ids, options, forced=forced, on_step=on_step)
        result = self._finish(prompt, generation)
        result.forced_tokens = len(forced)
        return result

    @torch.inference_mode()
    def align(
        self, source: str, target: str, *, template: str | None = None, heads_off: Iterable[tuple[int, int]] = ()
    ) -> LLMTranslation:
        """Teacher-forced: the model reads the prompt and ``target`` (then its stop token, scored
        but never fed), and returns the attention it paid on the way (``heads_off`` switched off)."""
        prompt = self.prompt(source, template)
        target_ids = self.loaded.tokenizer.encode(target)
        if not target_ids:
            raise PromptError("the target has no tokens")
        target_ids.append(self.loaded.config.stop_ids[0])
        ids = torch.tensor([prompt.ids + target_ids], device=self.loaded.model.device)
        off = [("decoder_self", layer, head) for layer, head in heads_off]
        with disabled_heads(self.loaded.model, off) if off else nullcontext():
            out = self.loaded.model(ids[:, :-1], need_weights=True)
        log_probs = torch.log_softmax(out.logits[0, len(prompt.ids) - 1 :].float(), -1)
        chosen = log_probs.gather(1, ids[0, len(prompt.ids) :, None])[:, 0].tolist()
        assert out.attention is not None
        generation = Generation(target_ids, chosen, float(sum(chosen)), out.attention[0])
        return self._finish(prompt, generation)
