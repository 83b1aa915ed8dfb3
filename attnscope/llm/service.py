"""The decoder-only models of a models directory, loaded once, and their answers as plain dicts.

No web here: :mod:`attnscope.serving.llm` is the HTTP door onto this service. Folders whose
``config.json`` names the decoder-only architecture are loaded (one that fails, or whose weights
would not fit in memory, is listed as unavailable with the reason); the rest of the directory
belongs to the encoder-decoder registry.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnscope.llm.explain import explanations
from attnscope.llm.folder import LLMFolderError, is_llm_folder, load_llm_folder
from attnscope.llm.prompt import PromptError
from attnscope.llm.search import LLMOptions, StepHook
from attnscope.llm.translator import LLMTranslation, LLMTranslator
from attnscope.llm.views import VIEWS, floats
from attnscope.nn.ablation import disabled_heads

logger = logging.getLogger(__name__)


class LLMRequestError(ValueError):
    """A request the model cannot answer; ``field`` names the part at fault, ``status`` the HTTP one."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        self.field, self.message, self.status = field, message, status
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class LLMRequest:
    """One translation (or, with ``target``, a teacher-forced alignment) request."""

    model: str
    text: str
    options: LLMOptions = field(default_factory=LLMOptions)
    template: str | None = None
    views: tuple[str, ...] = ("target_source",)
    heads_off: tuple[tuple[int, int], ...] = ()
    target: str | None = None
    explain: tuple[str, ...] = ()
    prefix: str | None = None  # what-if: the output starts with these tokens (forced), then goes on
    alternatives: int = 0  # the model's top-k tokens at each output position (0: none)
    return_scores: bool = False  # the anatomy: q·k after rotary, the scale, soft-capping, the scores
    on_demand: bool = False  # the views go to the attention store, not into the answer


@dataclass(frozen=True)
class Budget:
    """What one answer may cost: attention floats kept and answer bytes (estimated before decoding)."""

    max_floats: int
    max_answer_bytes: int
    bytes_per_float: int = 20  # a float in JSON: up to ~20 characters with its separator


def best_head(card: dict[str, Any], layers: int, heads: int) -> dict[str, Any] | None:
    """The card's best-aligning (layer, query head) from ``evaluate --alignment`` with its F1,
    None without one or when it is not a head of this model (a card copied from another)."""
    best = (card.get("alignment") or {}).get("best_head") if isinstance(card.get("alignment"), dict) else None
    try:
        layer, head, f1 = int(best["layer"]), int(best["head"]), float(best["f1"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None
    return {"layer": layer, "head": head, "f1": f1} if 0 <= layer < layers and 0 <= head < heads else None


class LLMService:
    """Every decoder-only model folder of ``models_dir``, by folder name."""

    def __init__(self, models_dir: str | Path, device: torch.device, budget: Budget) -> None:
        self.models_dir, self.device, self.budget = Path(models_dir), device, budget
        self.models: dict[str, LLMTranslator] = {}
        self.failed: dict[str, str] = {}

    def load_all(self) -> None:
        root = self.models_dir
        for folder in sorted(p for p in root.iterdir() if is_llm_folder(p)) if root.is_dir() else []:
            try:
                self.models[folder.name] = LLMTranslator(load_llm_folder(folder, self.device))
            except (OSError, LLMFolderError) as err:
                logger.error("decoder-only model %s is unavailable: %s", folder.name, err)
                self.failed[folder.name] = str(err)

    def describe(self) -> list[dict[str, Any]]:
        """Each model's id, pair, size, geometry (query heads) and prompt template."""
        return [{
            "id": mid, "source_lang": t.loaded.source_lang, "target_lang": t.loaded.target_lang,
            "name": t.loaded.card.get("name", mid), "model_type": (t.loaded.card.get("origin") or {}).get("model_type"),
            "parameters": t.loaded.model.num_parameters, "layers": t.loaded.config.layers,
            "heads": t.loaded.config.heads, "kv_heads": t.loaded.config.kv_heads, "prompt_template": t.template,
            "views": list(VIEWS), "best_head": best_head(t.loaded.card, t.loaded.config.layers, t.loaded.config.heads),
        } for mid, t in self.models.items()]  # fmt: skip

    def get(self, model_id: str) -> LLMTranslator:
        if model_id not in self.models:
            reason = f" ({self.failed[model_id]})" if model_id in self.failed else ""
            raise LLMRequestError("model", f"no decoder-only model {model_id!r}{reason}; served: {', '.join(self.models) or 'none'}", 404)
        return self.models[model_id]

    def admit(self, translator: LLMTranslator, request: LLMRequest, prompt_length: int, source: int) -> None:
        """413 when the kept attention (layers × query heads × (prompt + output)² positions) or the
        answer's views would pass the budget, counted with the whole output budget."""
        c = translator.loaded.config
        output = request.options.max_new_tokens if request.target is None else len(request.target) + 1
        n = prompt_length + output
        kept = c.layers * c.heads * n * n * request.options.beam_size if request.options.need_weights else 0
        # on demand the views stay on the server: the answer carries only the explanations asked
        shown = () if request.on_demand else request.views
        sent = floats(c.layers, c.heads, prompt=prompt_length, output=output, source=source, views=shown)
        sent += c.layers * output * (source + 1) if "rollout" in request.explain else 0  # + source_share
        sent += c.layers * c.heads * (output + 1) * source if "norm" in request.explain else 0  # + value_norms
        sent += c.layers * output * source if "value_zeroing" in request.explain else 0
        sent += c.layers * (output * (source + output + 1) + source * source) if "alti" in request.explain else 0
        if request.return_scores:  # scores and q·k for each view, plus each view row's logsumexp
            views = floats(c.layers, c.heads, prompt=prompt_length, output=output, source=source, views=request.views)
            sent += 2 * views + 2 * c.layers * c.heads * (2 * output + source)
        sent += output * request.alternatives * 3  # token, id and log-prob of each
        if kept > self.budget.max_floats:
            raise LLMRequestError("max_new_tokens", f"decoding keeps up to {kept:,} attention floats "
                                  f"({c.layers} layers × {c.heads} query heads × {n}² positions); the limit is "
                                  f"{self.budget.max_floats:,}: ask for fewer tokens or beams", 413)  # fmt: skip
        if sent * self.budget.bytes_per_float > self.budget.max_answer_bytes:
            raise LLMRequestError("views", f"the answer would carry {sent:,} attention floats, over the answer limit "
                                  f"of {self.budget.max_answer_bytes:,} bytes: ask for fewer views", 413)  # fmt: skip

    def answer(self, request: LLMRequest) -> dict[str, Any]:
        """Translate (or align) and return the answer (see docs/llm.md)."""
        return self._render(request, self.run(request))

    def run(self, request: LLMRequest, on_step: StepHook | None = None) -> LLMTranslation:
        """Check, admit and decode ``request`` (LLMRequestError naming the field at fault); the
        result before it is rendered, for :meth:`answer` and the common ``/api/translate`` answer.
        ``on_step`` hears each step of a greedy or sampled decode (a stream's step events)."""
        translator = self.get(request.model)
        config = translator.loaded.config
        for layer, head in request.heads_off:
            if not (0 <= layer < config.layers and 0 <= head < config.heads):
                raise LLMRequestError("disable_heads", f"no head ({layer}, {head}): the model has {config.layers} layers × {config.heads} query heads")
        try:
            prompt = translator.prompt(request.text, request.template)
            forced = len(translator.forced_ids(request.prefix)) if request.target is None else 0
            if forced >= request.options.max_new_tokens:
                raise LLMRequestError("prefix", f"has {forced} tokens, leaving no room within the "
                                      f"{request.options.max_new_tokens}-token output budget")  # fmt: skip
            self.admit(translator, request, len(prompt.ids), prompt.source_span[1] - prompt.source_span[0])
            if request.target is not None:
                result = translator.align(request.text, request.target, template=request.template,
                                          heads_off=request.heads_off)  # fmt: skip
            else:
                result = translator.translate(request.text, request.options, template=request.template,
                                              heads_off=request.heads_off, prefix=request.prefix, on_step=on_step)  # fmt: skip
        except LLMRequestError:
            raise
        except PromptError as err:
            raise LLMRequestError("prompt_template" if "template" in str(err) else "text", str(err)) from None
        except ValueError as err:  # past the model's positions
            raise LLMRequestError("text", str(err)) from None
        return result

    def _render(self, request: LLMRequest, result: LLMTranslation) -> dict[str, Any]:
        p = result.prompt
        answer: dict[str, Any] = {
            "model": request.model, "text": result.text, "prompt": p.filled.text, "prompt_tokens": p.tokens,
            "prompt_token_ids": p.ids, "source_span": list(p.source_span),
            "source_tokens": p.tokens[p.source_span[0] : p.source_span[1]], "target_token_ids": result.target_ids,
            "target_tokens": result.target_tokens, "token_logprobs": result.generation.token_logprobs,
            "score": result.generation.score, "heads_off": [list(h) for h in request.heads_off],
            "search": _search(request), "attention": None,
        }  # fmt: skip
        views = result.views
        if views is not None:
            answer["first_target_row"] = views.first_target_row
            answer["attention"] = {name: getattr(views, name).tolist() for name in request.views}
            if request.explain:
                model = self.get(request.model).loaded.model
                off = [("decoder_self", layer, head) for layer, head in request.heads_off]
                with disabled_heads(model, off) if off else nullcontext():
                    answer["explanations"] = explanations(
                        views, p.source_span, request.explain, model=model,
                        ids=(p.ids + result.target_ids)[: views.full.size(-1)],
                    )  # fmt: skip
            answer["attention"]["outside_source"] = views.outside_source.tolist()
        return answer


def _search(request: LLMRequest) -> dict[str, Any]:
    o = request.options
    if request.target is not None:
        return {"kind": "teacher_forced"}
    if o.sample:
        return {"kind": "sample", "temperature": o.temperature, "top_k": o.top_k, "top_p": o.top_p, "seed": o.seed}
    return {"kind": "beam" if o.beam_size > 1 else "greedy", "beam_size": o.beam_size, "max_new_tokens": o.max_new_tokens}
