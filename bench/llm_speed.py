"""Per-token decoding speed of a 0.5B-parameter-shaped decoder-only model (Qwen2.5-0.5B's shape:
24 layers, 896 wide, 14 query heads sharing 2 key/value heads of 64, feed-forward 4864, random
weights; the vocabulary smaller by default, ``--vocab``), greedy after a prompt, with and
without attention returned, and optionally Hugging Face ``generate`` on the same weights.

    .venv/bin/python bench/llm_speed.py [--vocab 32000] [--prompt 48] [--tokens 32] [--runs 3]
                                         [--threads 1] [--device cpu] [--peer]

Random weights never stop on their own, so every run decodes exactly ``--tokens`` tokens (the
stop ids are set to none of the vocabulary). "per token" is (decode time - prefill time) /
(tokens - 1): the cost of one cached step; the prefill of the prompt is reported apart. The two
modes run interleaved and the fastest of ``--runs`` counts (on a shared machine the slower runs
measure the neighbours).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.llm.search import LLMOptions, generate  # noqa: E402
from attnscope.nn.decoder_only import DecoderOnlyLM  # noqa: E402
from attnscope.nn.decoder_only_config import DecoderOnlyConfig  # noqa: E402


def qwen_shape(vocab: int) -> DecoderOnlyConfig:
    return DecoderOnlyConfig(
        vocab_size=vocab, d_model=896, layers=24, heads=14, kv_heads=2, head_dim=64, ff_dim=4864,
        max_positions=4096, rope_theta=1_000_000.0, norm_eps=1e-6, qkv_bias=True, tied_output=True,
        stop_ids=(vocab + 7,),  # no token stops a random model: every run decodes --tokens
    )  # fmt: skip


def timed(fn: object, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(model: DecoderOnlyLM, prompt: list[int], tokens: int, runs: int) -> dict[str, dict[str, float]]:
    """Both modes, interleaved run by run (a shared machine's load then hits both alike); the
    fastest run of each (the least disturbed)."""
    device = model.device
    ids = torch.tensor([prompt], device=device)
    times: dict[bool, dict[str, list[float]]] = {w: {"prefill": [], "total": []} for w in (True, False)}
    for weights in (True, False):
        generate(model, prompt, LLMOptions(max_new_tokens=2, need_weights=weights))  # warm-up
    for _ in range(runs):
        for weights in (True, False):
            with torch.inference_mode():
                times[weights]["prefill"].append(timed(lambda w=weights: model(ids, need_weights=w), device))
            options = LLMOptions(max_new_tokens=tokens, need_weights=weights)
            times[weights]["total"].append(timed(lambda o=options: generate(model, prompt, o), device))
    out = {}
    for weights, name in ((True, "with_attention"), (False, "without_attention")):
        prefill, total = min(times[weights]["prefill"]), min(times[weights]["total"])
        out[name] = {"prefill_s": prefill, "per_token_ms": 1000 * (total - prefill) / (tokens - 1), "total_s": total,
                     "per_token_ms_all_runs": [1000 * (t - prefill) / (tokens - 1) for t in times[weights]["total"]]}  # fmt: skip
    return out


def peer(model: DecoderOnlyLM, prompt: list[int], tokens: int, runs: int, attentions: bool) -> dict[str, float]:
    """Hugging Face Qwen2 of the same shape and dtype (its own random weights), eager attention
    (the implementation that can return the weights): ``generate(max_new_tokens=tokens)``, with
    ``output_attentions=True`` (every layer's weights of every step, as attnscope's "with
    attention" row returns them) or without."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    c = model.config
    dtype = next(model.parameters()).dtype
    hf = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.ff_dim, num_hidden_layers=c.layers,
        num_attention_heads=c.heads, num_key_value_heads=c.kv_heads, max_position_embeddings=c.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta}, tie_word_embeddings=True,
        attn_implementation="eager",
    ), ).eval().to(model.device, dtype)  # fmt: skip
    ids = torch.tensor([prompt], device=model.device)
    run = {"max_new_tokens": tokens, "min_new_tokens": tokens, "do_sample": False, "pad_token_id": 0,
           "output_attentions": attentions, "return_dict_in_generate": attentions}  # fmt: skip
    with torch.inference_mode():
        hf.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0)
        prefill = min(timed(lambda: hf(ids, output_attentions=attentions), model.device) for _ in range(runs))
        total = min(timed(lambda: hf.generate(ids, **run), model.device) for _ in range(runs))
    return {"prefill_s": prefill, "per_token_ms": 1000 * (total - prefill) / (tokens - 1), "total_s": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--prompt", type=int, default=48)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--peer", action="store_true", help="also time transformers' generate on the same shape")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    model = DecoderOnlyLM(qwen_shape(args.vocab)).eval().to(device, dtype)
    prompt = torch.randint(10, args.vocab, (args.prompt,)).tolist()
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "dtype": args.dtype,
        "threads": args.threads, "parameters": model.num_parameters,
        "prompt": args.prompt, "tokens": args.tokens,
    } | measure(model, prompt, args.tokens, args.runs)  # fmt: skip
    if args.peer:
        result["transformers_eager_with_attention"] = peer(model, prompt, args.tokens, args.runs, True)
        result["transformers_eager"] = peer(model, prompt, args.tokens, args.runs, False)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
