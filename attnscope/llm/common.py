"""A decoder-only model behind the doors every model has (``/api/translate``, ``/api/align``,
``/api/translate/batch``): the common request read into an :class:`~attnscope.llm.service.LLMRequest`,
and the result cut into the common answer's attention kinds.

The kinds are the views of the one causal matrix (:mod:`attnscope.llm.views`), named as an
encoder-decoder's: ``cross`` is ``target_source`` (the output rows over the source's prompt
tokens), ``encoder_self`` is ``source_source`` and ``decoder_self`` is ``target_target`` (keys:
the last prompt token, which plays BOS, and the output but its last token). ``return_beam`` gives
the beam tree (recorded from the search's steps: :mod:`attnscope.llm.beamtree`). A what-if ``prefix``,
``alternatives`` and ``return_scores`` (the anatomy: :mod:`attnscope.llm.anatomy`) are honoured.
The explanation methods in :data:`METHODS` (norm, rollout, value zeroing, ALTI: the registry's
``decoder_only`` runners) are answered. What a common request asks that a decoder-only model has
no definition for (protect, coverage penalty, hard alignment, other languages, a method outside
:data:`METHODS`) is refused with an :class:`LLMRequestError` naming the field, never silently ignored. No web and no engine here: the web layer (``attnscope.serving.llm_common``) builds the typed answer.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

from attnscope.llm.anatomy import anatomy, rows_of
from attnscope.llm.explain import UNAVAILABLE
from attnscope.llm.search import Chosen, LLMOptions, SearchStep
from attnscope.llm.service import LLMRequest, LLMRequestError
from attnscope.llm.translator import LLMTranslation, LLMTranslator
from attnscope.llm.views import Views, cut
from attnscope.nn.ablation import disabled_heads

# The common kinds, each a view of the causal matrix (module docstring).
KINDS: dict[str, str] = {"cross": "target_source", "encoder_self": "source_source", "decoder_self": "target_target"}
MAX_BEAM = 8  # the decoder-only beam search's bound (/api/llm/translate's)
DEFAULT_NEW_TOKENS = 64
# The explanation methods with a decoder-only runner in the registry (attnscope.explain)
METHODS: tuple[str, ...] = ("norm", "rollout", "value_zeroing", "alti")


def _refuse(field: str, what: str) -> LLMRequestError:
    return LLMRequestError(field, f"{what} is not available for decoder-only models (docs/llm.md)")


def _unsupported(body: Any, source_lang: str, target_lang: str) -> None:
    """LLMRequestError (422) for the first field a decoder-only model cannot honour."""
    checks = (("protect", "protect (placeholders)"), ("coverage_penalty", "a coverage penalty"),
              ("alignment", "a hard word alignment"))  # fmt: skip
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
    sampled: Any = sampling  # read only when sample holds
    options = LLMOptions(
        beam_size=beam, max_new_tokens=getattr(body, "max_length", None) or DEFAULT_NEW_TOKENS,
        sample=sample, temperature=sampled.temperature if sample else 1.0,
        top_k=sampled.top_k if sample else 0, top_p=sampled.top_p if sample else 1.0,
        seed=sampled.seed if sample else None, need_weights=need,
    )  # fmt: skip
    heads = tuple(dict.fromkeys((h.layer, h.head) for h in getattr(body, "disable_heads", None) or ()))
    texts = list(getattr(body, "texts", None) or [body.text])
    views = tuple(KINDS[k] for k in KINDS) if need else ()
    explain = tuple(dict.fromkeys(getattr(body, "explain", None) or ()))
    target = getattr(body, "target", None)
    prefix = getattr(body, "prefix", None)
    alternatives, scores = int(getattr(body, "alternatives", 0) or 0), bool(getattr(body, "return_scores", False))
    return [
        LLMRequest(model=body.model, text=text, options=options, views=views, heads_off=heads, target=target,
                   explain=explain, prefix=prefix if prefix and prefix.strip() else None, alternatives=alternatives,
                   return_scores=scores, on_demand=on_demand)  # fmt: skip
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


def _masked(t: torch.Tensor, decimals: int) -> list[Any]:
    """(…, K) as nested lists rounded to ``decimals``, ``-inf`` (a masked key) as None."""
    values = rounded(t.masked_fill(torch.isinf(t), 0.0), decimals).astype(object)
    values[torch.isinf(t).cpu().numpy()] = None
    return values.tolist()


def extras(
    translator: LLMTranslator, request: LLMRequest, result: LLMTranslation, decimals: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What ``return_scores`` and ``alternatives`` add, from one teacher-forced pass over what
    the decode ran (:func:`attnscope.llm.anatomy.anatomy`, the request's heads still off):
    (the common answer's fields, the ``llm`` field's ``anatomy``). The scores and q·k are cut as
    the kinds are; alternatives are (token id, log-prob) pairs per output position."""
    p, targets = result.prompt, result.target_ids
    if not (request.return_scores or request.alternatives) or not targets:
        return {}, {}
    model = translator.loaded.model
    off = [("decoder_self", layer, head) for layer, head in request.heads_off]
    with disabled_heads(model, off) if off else nullcontext():
        found = anatomy(model, [*p.ids, *targets][:-1], len(p.ids) - 1, top_k=request.alternatives)
    fields: dict[str, Any] = {}
    if request.alternatives:
        fields["alternatives"] = found.alternatives
    if not request.return_scores:
        return fields, {}
    first, span = len(p.ids) - 1, p.source_span
    cut_scores, cut_dot = kind_tensors(cut(found.scores, len(p.ids), span)), kind_tensors(cut(found.dot, len(p.ids), span))
    fields["attention_scores"] = {kind: _masked(t, decimals) for kind, t in cut_scores.items()}
    fields["key_dim"] = translator.loaded.config.head_dim
    fields["score_scale"] = 1.0 / found.scale
    lse = {kind: rounded(found.logsumexp[:, :, rows_of(kind, first, len(targets), span)], decimals).tolist()
           for kind in KINDS}  # fmt: skip
    detail = {"scale": found.scale, "softcap": found.softcap, "dot": {k: _masked(t, decimals) for k, t in cut_dot.items()},
              "logsumexp": lse}  # fmt: skip
    return fields, detail


STEP_TOP_K = 5  # the likeliest next tokens a step event reports (the encoder-decoders' stream's)


class StepEvents:
    """One decode's ``step`` events, shaped as an encoder-decoder's stream's
    (``attnscope.serving.stream``): ``step``; ``beam`` (1 greedy or sampling, else k);
    ``chosen``: per row of the next step the token extending row ``parent`` of this one (its
    ``logprob`` and summed ``score``); ``finished`` (beam): hypotheses that ended here, with their
    ``ranking``; ``ended`` empty (the decoder-only search keeps no tree); ``top``: per row the
    ``STEP_TOP_K`` likeliest next tokens; ``attention``: per row its choosing query's rows of each
    kind asked, cross ``[row][L][H][S]`` and decoder_self ``[row][L][H][t + 1]`` (keys: last
    prompt token + output so far), and at the first event encoder_self ``[L][H][S][S]`` and
    ``source_tokens``. No web: plain dicts."""

    def __init__(
        self, translator: LLMTranslator, prompt: Any, kinds: tuple[str, ...], *, decimals: int, beam: int,
        keep: Callable[[dict[str, torch.Tensor]], dict[str, Any]] | None = None,
    ) -> None:
        """``keep``: on demand, stores one step's rows ``{kind: (L, H, rows, K)}`` and gives the
        event's ``attention_id`` and ``attention_shapes`` (the event then carries no rows)."""
        self.translator, self.prompt, self.kinds, self.keep = translator, prompt, kinds, keep
        self.decimals, self.beam, self.sent = decimals, beam, 0

    def _kept(self, block: torch.Tensor, step: int) -> dict[str, Any]:
        """On demand: the step's rows of every kind, ``[layer][head][row][key]``, to ``keep``."""
        assert self.keep is not None
        (s0, s1), first = self.prompt.source_span, len(self.prompt.ids) - 1
        rows = block[:, :, :, -1].float()  # (R, L, H, K)
        found = {"cross": rows[..., s0:s1], "decoder_self": rows[..., first : first + step + 1]}
        attention = {kind: t.permute(1, 2, 0, 3).contiguous() for kind, t in found.items()}
        if self.sent == 0:
            attention["encoder_self"] = block[0, :, :, s0:s1, s0:s1].float()
        return self.keep(attention)

    def _attention(self, block: torch.Tensor, step: int) -> dict[str, Any]:
        """block (R, L, H, q, K) -> the kinds asked of each row's last query."""
        (s0, s1), first = self.prompt.source_span, len(self.prompt.ids) - 1
        rows = block[:, :, :, -1]  # (R, L, H, K)
        found: dict[str, Any] = {}
        if "cross" in self.kinds:
            found["cross"] = rounded(rows[..., s0:s1], self.decimals)
        if "decoder_self" in self.kinds:
            found["decoder_self"] = rounded(rows[..., first : first + step + 1], self.decimals)
        if "encoder_self" in self.kinds and self.sent == 0:
            found["encoder_self"] = rounded(block[0, :, :, s0:s1, s0:s1], self.decimals)
        return found

    def event(self, found: SearchStep) -> dict[str, Any]:
        """The event of one :class:`~attnscope.llm.search.SearchStep`."""
        top_p, top_id = found.log_probs.float().exp().topk(min(STEP_TOP_K, found.log_probs.size(-1)), dim=-1)
        ids = top_id.tolist()
        texts = iter(self.translator.token_texts([c.token for c in found.chosen + found.finished] + sum(ids, [])))

        def chosen(c: Chosen) -> dict[str, Any]:
            out = {"parent": c.parent, "token": next(texts), "token_id": c.token, "logprob": round(c.logprob, 6),
                   "score": round(c.score, 6)}  # fmt: skip
            return out if c.ranking is None else out | {"ranking": round(c.ranking, 6)}

        (s0, s1) = self.prompt.source_span
        event: dict[str, Any] = {"source_tokens": self.prompt.tokens[s0:s1]} if self.sent == 0 else {}
        event |= {
            "step": found.step, "beam": self.beam, "chosen": [chosen(c) for c in found.chosen],
            "finished": [chosen(c) for c in found.finished], "ended": [],
            "top": [[{"token": next(texts), "token_id": i, "p": round(q, 6)} for i, q in zip(row, probs, strict=True)]
                    for row, probs in zip(ids, top_p.tolist(), strict=True)],
        }  # fmt: skip
        if self.keep is not None and found.attention is not None:
            event |= self._kept(found.attention, found.step)
        else:
            event["attention"] = {} if found.attention is None else self._attention(found.attention, found.step)
        self.sent += 1
        return event
