"""The largest differences between each imported decoder-only layout (tests/llm/llm_builders.py: tiny
random models of odd sizes) and its original in ``transformers``: logits and every attention
matrix (eager ``output_attentions``) on two translation prompts, and whether greedy and beam-3
output equal ``generate``'s. Prints one JSON object per layout.

    .venv/bin/python bench/llm_parity.py [--tokens 12]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "llm"))

from llm_builders import LAYOUTS, build  # noqa: E402

from attnscope.hf.importer import import_model  # noqa: E402
from attnscope.llm.folder import load_llm_folder  # noqa: E402
from attnscope.llm.search import LLMOptions, generate  # noqa: E402
from attnscope.llm.translator import LLMTranslator  # noqa: E402

SENTENCES = ["A man is riding a bicycle.", "Children are playing football in the park."]


def layout_report(layout: str, root: Path, tokens: int) -> dict[str, object]:
    from transformers import AutoModelForCausalLM

    source = build(layout, root / layout)
    import_model(str(source), root / f"out-{layout}", dtype="float32", pair=("en", "de"))
    loaded = load_llm_folder(root / f"out-{layout}")
    original = AutoModelForCausalLM.from_pretrained(source, attn_implementation="eager", dtype=torch.float32).eval()
    c = loaded.config
    report: dict[str, object] = {"layout": layout, "layers": c.layers, "heads": c.heads, "kv_heads": c.kv_heads,
                                 "head_dim": c.head_dim, "d_model": c.d_model, "window": c.sliding_window}  # fmt: skip
    logit, attention, same = 0.0, 0.0, []
    for sentence in SENTENCES:
        ids = LLMTranslator(loaded).prompt(sentence).ids
        with torch.no_grad():
            theirs = original(input_ids=torch.tensor([ids]), output_attentions=True)
            ours = loaded.model(torch.tensor([ids]), need_weights=True)
        logit = max(logit, float((ours.logits - theirs.logits).abs().max()))
        attention = max(attention, max(float((ours.attention[:, i] - a).abs().max()) for i, a in enumerate(theirs.attentions)))
        for beams in (1, 3):
            out = original.generate(torch.tensor([ids]), max_new_tokens=tokens, num_beams=beams, do_sample=False,
                                    eos_token_id=list(c.stop_ids), pad_token_id=c.pad_id)[0, len(ids):].tolist()  # fmt: skip
            mine = generate(loaded.model, ids, LLMOptions(beam_size=beams, max_new_tokens=tokens)).tokens
            same.append(mine == out[: len(mine)] and len(out) >= len(mine))
    return report | {"prompt_tokens": len(ids), "max_logit_difference": logit,
                     "max_attention_difference": attention, "greedy_and_beam_equal_generate": all(same)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for layout in LAYOUTS:
            sys.stdout.write(json.dumps(layout_report(layout, Path(tmp), args.tokens)) + "\n")


if __name__ == "__main__":
    main()
