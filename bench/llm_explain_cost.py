"""What the decoder-only extras cost on a 0.5B-parameter-shaped model (Qwen2.5-0.5B's shape,
random weights, ``bench/llm_speed.py``'s ``qwen_shape``): the anatomy + alternatives pass
(``return_scores``, ``alternatives``), ALTI, and attribution (input × gradient and integrated
gradients over ``--steps``), each on one sentence of ``--prompt`` prompt tokens (the source the
middle third) and ``--tokens`` output tokens, against one plain teacher-forced pass.

    .venv/bin/python bench/llm_explain_cost.py [--vocab 32000] [--prompt 48] [--tokens 16]
                                               [--steps 8] [--threads 1] [--device cpu]

The fastest of ``--runs`` counts (on a shared machine the slower runs measure the neighbours).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_speed import qwen_shape  # noqa: E402

from attnscope.explain.alti import decoder_only_alti  # noqa: E402
from attnscope.explain.registry import Sentence  # noqa: E402
from attnscope.llm.anatomy import anatomy  # noqa: E402
from attnscope.llm.attribution import attribute_llm  # noqa: E402
from attnscope.nn.decoder_only import DecoderOnlyLM  # noqa: E402


def fastest(fn: Callable[[], object], runs: int, device: torch.device) -> float:
    times = []
    for _ in range(runs):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--prompt", type=int, default=48)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = DecoderOnlyLM(qwen_shape(args.vocab)).to(device).eval()
    prompt = torch.randint(0, args.vocab, (args.prompt,)).tolist()
    target = torch.randint(0, args.vocab, (args.tokens,)).tolist()
    span = (args.prompt // 3, 2 * args.prompt // 3)
    ids = torch.tensor([[*prompt, *target][:-1]], device=device)
    sentence = Sentence(model, prompt, target, source_span=span)  # type: ignore[arg-type]
    with torch.inference_mode():
        rows = {
            "teacher-forced pass, attention returned": fastest(lambda: model(ids, need_weights=True), args.runs, device),
            "anatomy + 5 alternatives": fastest(lambda: anatomy(model, ids[0].tolist(), args.prompt - 1, top_k=5), args.runs, device),
            "ALTI": fastest(lambda: decoder_only_alti(sentence), args.runs, device),
        }  # fmt: skip
    rows[f"attribution, {args.steps} IG steps"] = fastest(
        lambda: attribute_llm(model, prompt, span, target, steps=args.steps), 1, device
    )
    print(json.dumps({"parameters": model.num_parameters, "device": str(device), "threads": args.threads,
                      "prompt": args.prompt, "tokens": args.tokens,
                      "seconds": {k: round(v, 3) for k, v in rows.items()}}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
