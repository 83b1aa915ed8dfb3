"""``return_beam`` for decoder-only models over the session's real server: the whole beam tree in
the encoder–decoder's shape, whose best path is the returned output and whose finished
hypotheses, best first, are Hugging Face ``generate(num_beams=k)``'s on the same prompt ids."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_served import SOURCE, post

from attnscope.llm.folder import load_llm_folder


def _checked_tree(answer: dict) -> dict:
    """The tree's invariants: back-pointers one step up, each score the parent's plus the logprob."""
    tree = answer["beam"]
    nodes = tree["nodes"]
    assert (
        nodes[0]["parent"] is None and nodes[0]["token_id"] == answer["llm"]["prompt_token_ids"][-1]
    )
    for node in nodes[1:]:
        parent = nodes[node["parent"]]
        assert node["step"] == parent["step"] + 1
        assert node["score"] == pytest.approx(parent["score"] + node["logprob"], abs=1e-4)
    assert [nodes[i]["token_id"] for i in tree["best"][1:]] == answer["llm"]["target_token_ids"]
    assert [nodes[i]["token"] for i in tree["best"][1:]] == answer["target_tokens"]
    assert tree["hypotheses"][0]["node"] == tree["best"][-1] and nodes[tree["best"][-1]]["finished"]
    return tree


def test_the_beam_tree_is_the_searchs_and_its_hypotheses_are_generates(
    server: str, llm_sources: dict[str, Path], llm_models: Path
) -> None:
    from transformers import AutoModelForCausalLM

    k, budget = 3, 9
    status, a = post(f"{server}/api/translate", {"model": "en-de-llama", "text": SOURCE, "beam_size": k,
                                                 "max_length": budget, "return_beam": True})  # fmt: skip
    assert status == 200, a
    tree = _checked_tree(a)
    assert max(n["step"] for n in tree["nodes"]) <= budget
    assert len(tree["nodes"]) > len(tree["best"])  # other hypotheses were kept, not the path alone
    steps = {}
    for n in tree["nodes"]:
        if not n["finished"]:
            steps[n["step"]] = steps.get(n["step"], 0) + 1
    assert all(
        count <= k for step, count in steps.items() if step > 0
    )  # at most k live rows a step
    original = AutoModelForCausalLM.from_pretrained(llm_sources["llama"], attn_implementation="eager",
                                                    dtype=torch.float32).eval()  # fmt: skip
    ids = a["llm"]["prompt_token_ids"]
    config = load_llm_folder(llm_models / "en-de-llama").config
    with torch.no_grad():
        out = original.generate(torch.tensor([ids]), max_new_tokens=budget, num_beams=k, num_return_sequences=k,
                                do_sample=False, eos_token_id=list(config.stop_ids),
                                pad_token_id=config.pad_id, return_dict_in_generate=True, output_scores=True)  # fmt: skip
    nodes = tree["nodes"]
    assert len(tree["hypotheses"]) >= k and out.sequences.size(0) == k
    for h, sequence, score in zip(
        tree["hypotheses"], out.sequences, out.sequences_scores, strict=False
    ):
        path, node = [], h["node"]
        while nodes[node]["parent"] is not None:
            path.append(nodes[node]["token_id"])
            node = nodes[node]["parent"]
        theirs = sequence[len(ids) :].tolist()
        assert path[::-1] == theirs[: len(path)]
        assert h["ranking"] == pytest.approx(float(score), abs=1e-4)


def test_greedy_and_a_prefix_give_one_path_trees(server: str) -> None:
    base = {"model": "en-de-qwen2", "text": SOURCE, "max_length": 6, "return_beam": True}
    status, greedy = post(f"{server}/api/translate", base | {"beam_size": 1})
    assert status == 200, greedy
    tree = _checked_tree(greedy)
    assert len(tree["nodes"]) == len(tree["best"]) and len(tree["hypotheses"]) == 1
    status, forced = post(f"{server}/api/translate", base | {"beam_size": 2, "prefix": "Zwei"})
    assert status == 200, forced
    tree = _checked_tree(forced)
    first = forced["forced_tokens"]
    assert first >= 1 and all(
        len([n for n in tree["nodes"] if n["step"] == s]) == 1 for s in range(1, first + 1)
    )
