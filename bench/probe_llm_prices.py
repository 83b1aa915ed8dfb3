"""Calibrates admission's price of the LLM routes (``attnscope/engine/llm_route_prices.py``):
in-process, one thread, the seconds per unit of work of the scheduler's start-up decode (the
shipped en-de-transformer, ``attnscope.engine.service.CALIBRATION``) and the seconds per priced
flop of the LLM lens, patching, translation, integrated gradients and the four explanations on a random decoder-only model of the given
sizes (no weights are downloaded). Their ratio is ``flops_per_work``: the table's constant
(``LLM_FLOPS_PER_WORK``) should sit near the lowest seen (a lower one prices more work, so a
price that errs errs towards refusing).

    .venv/bin/python bench/probe_llm_prices.py [--width 512 --layers 6 --vocab 32000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.* from a script

from attnscope.config import REPO_ROOT
from attnscope.engine import limits
from attnscope.engine.llm_route_prices import EXPLAIN_METHODS, llm_shape
from attnscope.engine.route_prices import ROUTE_PRICES
from attnscope.engine.service import CALIBRATION
from attnscope.explain import registry
from attnscope.inside import decoder_only as inside
from attnscope.llm.attribution import attribute_llm
from attnscope.llm.search import LLMOptions, generate
from attnscope.nn.decoder_only import DecoderOnlyLM
from attnscope.nn.decoder_only_config import DecoderOnlyConfig
from attnscope.repository import load_model_folder
from attnscope.translator import Translator
from bench.probe_prices import timed  # median of repeats after a warm-up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32_000)
    parser.add_argument("--prompt", type=int, default=40)
    parser.add_argument("--target", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=16, help="integrated gradients' steps")
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = load_model_folder(REPO_ROOT / "models" / "en-de-transformer")
    translator = Translator(loaded, max_source_tokens=10_000)
    digits = " ".join(str(i % 10) for i in range(CALIBRATION["digits"]))
    source = len(translator.source_ids(digits))
    work = limits.attention_floats(loaded.config, [source], [CALIBRATION["max_length"]], CALIBRATION["beams"])
    with torch.inference_mode():
        decode_s = timed(lambda: translator.translate([digits], beam_size=CALIBRATION["beams"],
                                                      max_length=CALIBRATION["max_length"]), args.repeats)  # fmt: skip
    s_per_work = decode_s / work
    print(f"start-up decode: {decode_s:.2f} s, {work / 1e6:.1f} M work, {s_per_work:.2e} s/work")
    torch.manual_seed(0)
    head_dim = args.width // args.heads
    config = DecoderOnlyConfig(vocab_size=args.vocab, d_model=args.width, layers=args.layers, heads=args.heads,
                               kv_heads=max(1, args.heads // 2), head_dim=head_dim, ff_dim=int(2.75 * args.width),
                               max_positions=4096)  # fmt: skip
    model = DecoderOnlyLM(config).eval()
    prompt = [int(i) for i in torch.randint(4, args.vocab, (args.prompt,))]
    corrupted = [int(i) for i in torch.randint(4, args.vocab, (args.prompt,))]
    target = [int(i) for i in torch.randint(4, args.vocab, (args.target,))]
    options = LLMOptions(beam_size=1, max_new_tokens=args.target, need_weights=False)
    jobs = {
        "llm_lens": (lambda: inside.inspect(model, prompt, target), args.target),
        "llm_patching": (lambda: inside.patch(model, prompt, corrupted, target), args.target),
        "llm_translation": (lambda: generate(model, prompt, options), args.target),
    }
    span = (2, args.prompt - 2)  # the source tokens inside the prompt
    knobs = {"steps": args.steps, "span": span[1] - span[0]}
    sentence = registry.Sentence(model, prompt, target, source_span=span)
    for method in EXPLAIN_METHODS:  # each decoder-only explanation of a stored answer (by id)
        jobs[f"llm_explain_{method}"] = (lambda m=method: registry.method(m).runs["decoder_only"](sentence), args.target)
    # integrated gradients need the autograd graph: run outside inference mode (as the route does)
    graded = {"llm_attribution": (lambda: attribute_llm(model, prompt, span, target, steps=args.steps), args.target)}
    print(f"LLM D={args.width} L={args.layers} H={args.heads} V={args.vocab}, prompt {args.prompt}, target {args.target}")
    for name, (job, length) in {**jobs, **graded}.items():
        with torch.inference_mode(name not in graded):
            seconds = timed(job, args.repeats)
        shape = llm_shape(config, args.prompt, length)
        flops = ROUTE_PRICES[name].flops(replace(shape, knobs={**shape.knobs, **knobs}))
        print(f"{name}: {seconds:.3f} s, {flops / 1e9:.2f} GFLOP priced, {flops / seconds / 1e9:.1f} GFLOP/s, "
              f"flops/work {s_per_work / (seconds / flops):.0f} (table: {ROUTE_PRICES[name].flops_per_work:g})", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
