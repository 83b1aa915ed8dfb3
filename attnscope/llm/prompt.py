"""The translation prompt of a decoder-only model.

A card holds one prompt template: plain text with exactly one ``{source}`` (and, optionally,
``{source_language}`` / ``{target_language}``). For an instruct model it is the model's own chat
template (``tokenizer_config.json`` or ``chat_template.jinja``) rendered with Jinja2 the way
Hugging Face's ``apply_chat_template`` renders it (sandboxed, ``trim_blocks``, ``lstrip_blocks``,
``raise_exception``, ``tojson``, a generation prompt) around a user message naming the languages;
for a base model without a chat template it is a plain completion template. Filling a template
gives the exact prompt text and the character range of the source inside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

SOURCE = "{source}"
INSTRUCTION = "Translate the following {source_language} text into {target_language}. Reply with the translation only.\n\n{source}"
COMPLETION = "{source_language}: {source}\n{target_language}:"

LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese",
    "nl": "Dutch", "ru": "Russian", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "cs": "Czech",
    "pl": "Polish", "uk": "Ukrainian", "ar": "Arabic", "tr": "Turkish", "sv": "Swedish", "fi": "Finnish",
    "da": "Danish", "no": "Norwegian", "el": "Greek", "hu": "Hungarian", "ro": "Romanian", "hi": "Hindi",
    "is": "Icelandic", "et": "Estonian", "lv": "Latvian", "lt": "Lithuanian", "bg": "Bulgarian",
}  # fmt: skip


class PromptError(ValueError):
    """A prompt template that cannot be used; the message says why."""


def language_name(code: str) -> str:
    """English name of a language code ("de" -> "German"); the code itself when unknown."""
    return LANGUAGE_NAMES.get(code.split("_")[0].split("-")[0].lower(), code)


def render_chat(chat_template: str, messages: list[dict[str, str]], special: dict[str, str]) -> str:
    """``chat_template`` rendered as ``apply_chat_template(messages, add_generation_prompt=True,
    tokenize=False)`` renders it; ``special``: the tokenizer's special tokens (bos_token, ...)."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:  # fmt: skip
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(chat_template).render(messages=messages, add_generation_prompt=True, **special)
    except jinja2.exceptions.TemplateError as err:
        raise PromptError(f"the chat template could not be rendered: {err}") from err


def default_template(chat_template: str | None, special: dict[str, str]) -> tuple[str, str]:
    """The card's prompt template and its kind ("chat" or "completion")."""
    if chat_template:
        return render_chat(chat_template, [{"role": "user", "content": INSTRUCTION}], special), "chat"
    return COMPLETION, "completion"


@dataclass(frozen=True)
class FilledPrompt:
    """The exact prompt text and where the source lies in it: ``text[start:end] == source``."""

    text: str
    start: int
    end: int


def fill(template: str, source: str, *, source_lang: str, target_lang: str) -> FilledPrompt:
    """``template`` with the language names and ``source`` put in; PromptError unless it has
    exactly one ``{source}``."""
    if template.count(SOURCE) != 1:
        raise PromptError(f"a prompt template needs exactly one {SOURCE}, this one has {template.count(SOURCE)}")
    before, after = template.split(SOURCE)
    names = {"{source_language}": language_name(source_lang), "{target_language}": language_name(target_lang)}
    for key, value in names.items():
        before, after = before.replace(key, value), after.replace(key, value)
    return FilledPrompt(before + source + after, len(before), len(before) + len(source))


def token_span(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """[first, last) of the tokens whose characters (``offsets``, one (start, end) per token)
    overlap the characters [start, end); PromptError when none does."""
    inside = [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
    if not inside:
        raise PromptError("no prompt token covers the source text")
    return inside[0], inside[-1] + 1
