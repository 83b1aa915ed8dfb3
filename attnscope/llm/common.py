"""A decoder-only model behind the doors every model has (``/api/translate``, ``/api/align``,
``/api/translate/batch``): the common request read into an :class:`~attnscope.llm.service.LLMRequest`,
and the result cut into the common answer's attention kinds.

The kinds are the views of the one causal matrix (:mod:`attnscope.llm.views`), named as an
encoder-decoder's: ``cross`` is ``target_source`` (the output rows over the source's prompt
tokens), ``encoder_self`` is ``source_source`` and ``decoder_self`` is ``target_target`` (keys:
the last prompt token, which plays BOS, and the output but its last token). ``return_beam`` gives
the returned hypothesis's path only (the decoder-only search keeps no tree). What a common request
asks that a decoder-only model has no definition for (a forced prefix, the beam tree, raw scores,
alternatives, protect, coverage penalty, hard alignment, other languages, ALTI)
is refused with an :class:`LLMRequestError` naming the field, never silently ignored. No web
and no engine here: the web layer (``attnscope.serving.llm_common``) builds the typed answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnscope.llm.explain import UNAVAILABLE
from attnscope.llm.search import LLMOptions
from attnscope.llm.service import LLMRequest, LLMRequestError
from attnscope.llm.translator import LLMTranslation
from attnscope.llm.views import Views

# The common kinds, each a view of the causal matrix (module docstring).
KINDS: dict[str, str] = {"cross": "target_source", "encoder_self": "source_source", "decoder_self": "target_target"}
MAX_BEAM = 8  # the decoder-only beam search's bound (/api/llm/translate's)
DEFAULT_NEW_TOKENS = 64
# The explanation methods with a decoder-only runner in the registry (attnscope.explain)
METHODS: tuple[str, ...] = ("norm", "rollout", "value_zeroing")


def _refuse(field: str, what: str) -> LLMRequestError:
    return LLMRequestError(field, f"{what} is not available for decoder-only models (docs/llm.md)")


def _unsupported(body: Any, source_lang: str, target_lang: str) -> None:
    """LLMRequestError (422) for the first field a decoder-only model cannot honour."""
    if getattr(body, "prefix", None) is not None and body.prefix.strip():
        raise _refuse("prefix", "a forced prefix (what-if)")
    checks = (("return_scores", "raw scores and context vectors"),
              ("alternatives", "alternatives"), ("protect", "protect (placeholders)"),
              ("coverage_penalty", "a coverage penalty"), ("alignment", "a hard word alignment"))  # fmt: skip
    for name, what in checks:
        if getattr(body, name, None):
            raise _refuse(name, what)
    for name, ours in (("source_lang", source_lang), ("target_lang", target_lang)):
        asked = getattr(body, name, None)
        if asked is not None and asked != ours:
            raise LLMRequestError(name, f"this model's prompt translates {source_lang}-{target_lang}; "
                                  f"use /api/llm/translate with your own prompt_template for {asked!r}")  # fmt: skip
    for name in getattr(body, "explain", None) or ():
        if name not in METHODS:
            reason = UNAVAILABLE.get(name, "it has no definition for decoder-only models")
            raise LLMRequestError("explain", f"{name!r} is not available for decoder-only models: {reason}")


def kinds_asked(attention: Any) -> tuple[tuple[str, ...], bool]:
    """The common ``attention`` field -> (kinds returned inline, on demand)."""
    if attention == "on_demand":
        return (), True
    return (tuple(KINDS) if attention is None else tuple(k for k in KINDS if k in attention)), False


def llm_requests(body: Any, *, source_lang: str, target_lang: str) -> list[LLMRequest]:
    """One :class:`LLMRequest` per text of a common translate, batch or align body (read by
    attribute: ``text``/``texts``, ``target``, ``beam_size``, ``max_length``, ``sampling``,
    ``disable_heads``, ``explain``, ``attention``)."""
    _unsupported(body, source_lang, target_lang)
    kinds, on_demand = kinds_asked(getattr(body, "attention", None))
    need = bool(kinds) or on_demand or bool(getattr(body, "explain", None))
    beam = int(getattr(body, "beam_size", 1))
    if beam > MAX_BEAM:
        raise LLMRequestError("beam_size", f"a decoder-only model searches with at most {MAX_BEAM} beams, not {beam}")
    sampling = getattr(body, "sampling", None)
    sample = sampling is not None and sampling.temperature > 0  # temperature 0 is greedy
    options = LLMOptions(
        beam_size=beam, max_new_tokens=getattr(body, "max_length", None) or DEFAULT_NEW_TOKENS,
        sample=sample, temperature=sampling.temperature if sample else 1.0,
        top_k=sampling.top_k if sample else 0, top_p=sampling.top_p if sample else 1.0,
        seed=sampling.seed if sample else None, need_weights=need,
    )  # fmt: skip
    heads = tuple(dict.fromkeys((h.layer, h.head) for h in getattr(body, "disable_heads", None) or ()))
    texts = list(getattr(body, "texts", None) or [body.text])
    views = tuple(KINDS[k] for k in KINDS) if need else ()
    explain = tuple(dict.fromkeys(getattr(body, "explain", None) or ()))
    target = getattr(body, "target", None)
    return [
        LLMRequest(model=body.model, text=text, options=options, views=views, heads_off=heads, target=target,
                   explain=explain, on_demand=on_demand)  # fmt: skip
        for text in texts
    ]


def rounded(t: torch.Tensor, decimals: int) -> np.ndarray:
    """A tensor as the C-contiguous float64 array an answer holds, rounded to ``decimals``."""
    return t.detach().to("cpu", torch.float64).round(decimals=decimals).contiguous().numpy()


def kind_tensors(views: Views) -> dict[str, torch.Tensor]:
    """kind -> (L, H, Q, K): the common kinds of ``views``."""
    return {kind: getattr(views, view) for kind, view in KINDS.items()}


def context(result: LLMTranslation, decimals: int) -> dict[str, Any]:
    """The answer's ``llm`` field: what exactly ran (the prompt, its tokens and ids, the source's
    token span, the output ids), the row of the first output token in the causal matrix, and each
    output row's attention mass outside the source, ``[layer][head][target]``."""
    p, views = result.prompt, result.views
    return {
        "prompt": p.filled.text, "prompt_tokens": p.tokens, "prompt_token_ids": p.ids,
        "source_span": list(p.source_span), "target_token_ids": result.target_ids,
        "first_target_row": len(p.ids) - 1,
        "outside_source": None if views is None else rounded(views.outside_source, decimals).tolist(),
    }  # fmt: skip
