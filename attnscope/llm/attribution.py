"""Gradient attribution of a decoder-only model's output to the source inside its prompt, as
:mod:`attnscope.attribution` attributes an encoder-decoder's output to its source.

The function attributed is ``f_t = log p(y_t | prompt, y_<t)``, teacher-forced over the prompt
and the output; the input attributed is the embeddings ``x`` (S, D) of the prompt's *source*
tokens (the span ``[s0, s1)``): the instruction, the chat markup and the output so far keep their
own embeddings and are not attributed (so the rows read like the ``cross`` kind, output ×
source). The embeddings are the embedding table's rows, before Gemma's ``√d`` scale and before
GPT-2's learned positions (both applied after, inside the model).

- input × gradient: ``a[t, s] = Σ_d x[s, d] · ∂f_t/∂x[s, d]``;
- integrated gradients from the baseline in which the source embeddings are 0 (the rest of the
  prompt unchanged), the straight path ``α·x``, trapezoid rule over ``steps`` intervals; they
  satisfy completeness, ``Σ_s a[t, s] ≈ f_t(x) − f_t(baseline)``.

:func:`contrast_llm` is the contrastive attribution (why y_t rather than a foil, one token or a
whole continuation of several) in the same setting. The result is an :class:`attnscope.attribution.Attribution`, so the encoder-decoders'
normalisation and per-head rank correlations apply unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnscope.attribution import Attribution, along_path, ig_path
from attnscope.nn.decoder_only import DecoderOnlyLM


def attribute_llm(
    model: DecoderOnlyLM, prompt: list[int], span: tuple[int, int], target: list[int], *, steps: int = 16,
    should_stop: Callable[[], bool] | None = None,
) -> Attribution:  # fmt: skip
    """Attributions (T, S) of the ``target`` ids (the output, its stop token included) after
    ``prompt`` to the prompt's source tokens ``span``; ``should_stop`` is asked before each
    target token's backward pass (True raises :class:`~attnscope.decoding.DecodeStopped`)."""
    if steps < 1:
        raise ValueError("integrated gradients need at least one step")
    if not target:
        raise ValueError("the target has no tokens")
    with torch.inference_mode(False), torch.enable_grad():
        return _attribute(model, prompt, span, target, steps, should_stop or (lambda: False))


def _attribute(
    model: DecoderOnlyLM, prompt: list[int], span: tuple[int, int], target: list[int], steps: int,
    should_stop: Callable[[], bool],
) -> Attribution:  # fmt: skip
    s0, s1 = span
    ids = [*prompt, *target][:-1]
    alphas, batch, weights = ig_path(ids, steps, model.device)  # (m+1,), (m+1, n), (m+1,)
    store: dict[str, Tensor] = {}

    def scaled(_module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> Tensor | None:
        if inputs[0] is not batch:
            return None
        x = output.detach()[:, s0:s1]  # (m+1, S, D) the source's embeddings
        z = (x * alphas.view(-1, 1, 1)).requires_grad_(True)  # the path points αx
        store["x"], store["z"] = x, z
        return torch.cat([output.detach()[:, :s0], z, output.detach()[:, s1:]], dim=1)

    was_training = model.training
    model.eval()
    handle = model.embed.register_forward_hook(scaled)
    try:
        logits = model(batch).logits.float()[:, len(prompt) - 1 :]  # (m+1, T, V)
        wanted = torch.tensor(target, device=model.device)[None, :, None].expand(logits.size(0), -1, 1)
        f = torch.log_softmax(logits, -1).gather(-1, wanted)[..., 0]  # (m+1, T)
        return along_path(f, store["x"], store["z"], weights, should_stop)
    finally:
        handle.remove()
        model.train(was_training)


def contrast_llm(
    model: DecoderOnlyLM, prompt: list[int], span: tuple[int, int], target: list[int], *, position: int,
    foil: int | list[int], steps: int = 16,
) -> Attribution:  # fmt: skip
    """Contrastive attribution (Yin & Neubig 2022, :mod:`attnscope.explain.contrastive`) of a
    decoder-only output: f = log p(target[position] | h) − log p(foil | h), h = ``prompt`` + the
    output before ``position``, attributed to the embeddings of the prompt's source tokens
    ``span``, input × gradient and integrated gradients from the zero source: an
    :class:`Attribution` of one row, (1, S), ``f`` and ``f_baseline`` (1,).

    A foil of several tokens (f_1 … f_K) is scored as a whole continuation, teacher-forced from
    the same h: log p(foil | h) = Σ_k log p(f_k | h, f_<k), one forward pass over h + f_<K. Its
    first token's term is taken with the fact's as the logit difference (softmax's normaliser
    cancels), so a one-token foil is exactly the logit difference it always was."""
    foils = [foil] if isinstance(foil, int) else list(foil)
    if not foils:
        raise ValueError("the foil has no tokens")
    if not 0 <= position < len(target):
        raise ValueError(f"position {position} is outside the target's {len(target)} tokens")
    if steps < 1:
        raise ValueError("integrated gradients need at least one step")
    with torch.inference_mode(False), torch.enable_grad():
        s0, s1 = span
        at = len(prompt) + position - 1  # the step that writes ``position``
        ids = [*prompt, *target[:position], *foils[:-1]]
        alphas, batch, weights = ig_path(ids, steps, model.device)  # (m+1,), (m+1, n), (m+1,)
        store: dict[str, Tensor] = {}

        def scaled(_module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> Tensor | None:
            if inputs[0] is not batch:
                return None
            store["x"] = x = output.detach()[:, s0:s1]
            store["z"] = z = (x * alphas.view(-1, 1, 1)).requires_grad_(True)
            return torch.cat([output.detach()[:, :s0], z, output.detach()[:, s1:]], dim=1)

        was_training = model.training
        model.eval()
        handle = model.embed.register_forward_hook(scaled)
        try:
            logits = model(batch).logits[:, at:].float()  # (m+1, K, V) the fact's step, then the foil's
            f = logits[:, 0, target[position]] - logits[:, 0, foils[0]]  # (m+1,)
            if len(foils) > 1:  # the foil's later tokens, each after the ones before it
                rest = torch.tensor(foils[1:], device=model.device)[None, :, None].expand(logits.size(0), -1, 1)
                f = f - torch.log_softmax(logits[:, 1:], -1).gather(-1, rest)[..., 0].sum(-1)
            (grad,) = torch.autograd.grad(f.sum(), store["z"])
            integrand = (grad * store["x"]).sum(-1)  # (m+1, S)
        finally:
            handle.remove()
            model.train(was_training)
    return Attribution(
        input_x_gradient=integrand[-1:].detach(),
        integrated_gradients=(weights[:, None] * integrand).sum(0, keepdim=True).detach(),
        f=f[-1:].detach(),
        f_baseline=f[:1].detach(),
    )
