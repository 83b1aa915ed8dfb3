"""The beam tree that beam search returns when asked, forced prefixes (greedy and beam), and
GNMT's coverage penalty."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attnscope.decoding import beam_search, greedy_decode, score_targets
from attnscope.decoding.history import gnmt_coverage
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import BOS_ID, EOS_ID

a, b, c = 4, 5, 6  # words of the scripted model


def test_tree_holds_the_returned_hypothesis_and_every_finished_one(
    model: Seq2Seq, src: Tensor
) -> None:
    plain = beam_search(model, src, beam_size=3, max_length=8)
    out = beam_search(model, src, beam_size=3, max_length=8, return_tree=True)
    assert torch.equal(out.tokens, plain.tokens)  # asking for the tree changes nothing
    assert out.trees is not None and plain.trees is None
    for hyp in out.hypotheses():
        tree = hyp.tree
        assert tree is not None
        root = tree.nodes[0]
        assert root.parent is None and root.step == 0 and root.token == model.config.bos_id
        for node in tree.nodes[1:]:
            assert node.parent is not None and 0 <= node.parent < node.id
            parent = tree.nodes[node.parent]
            assert parent.step == node.step - 1 and not parent.finished
            assert node.score == pytest.approx(parent.score + node.logprob, abs=1e-4)
        assert tree.best[0] == 0 and tree.nodes[tree.best[-1]].finished
        assert [tree.nodes[i].token for i in tree.best[1:]] == hyp.tokens
        assert [tree.nodes[i].logprob for i in tree.best[1:]] == pytest.approx(
            hyp.token_logprobs, abs=1e-5
        )
        assert tree.hypotheses[0].tokens == hyp.tokens
        assert tree.hypotheses[0].score == pytest.approx(hyp.score, abs=1e-4)
        rankings = [h.ranking for h in tree.hypotheses]
        assert rankings == sorted(rankings, reverse=True)
        for h in tree.hypotheses:
            assert tree.nodes[h.node].finished
            assert [tree.nodes[i].token for i in tree.path(h.node)[1:]] == h.tokens


def test_tree_keeps_the_branch_greedy_would_take(scripted: Callable[..., Seq2Seq]) -> None:
    trap = {
        (): {a: 0.5, b: 0.4, c: 0.1},
        (a,): {a: 0.35, b: 0.35, c: 0.3},
        (b,): {c: 0.9, a: 0.1},
        (b, c): {EOS_ID: 1.0},
    }
    out = beam_search(
        scripted(trap),
        torch.tensor([[7, 7, 3]]),
        beam_size=2,
        alpha=0.0,
        max_length=6,
        return_tree=True,
    )
    tree = out.hypotheses()[0].tree
    assert tree is not None
    first = {
        tree.nodes[i].token: tree.nodes[i]
        for i in range(1, len(tree.nodes))
        if tree.nodes[i].step == 1
    }
    assert set(first) == {a, b}
    assert first[a].logprob == pytest.approx(math.log(0.5), abs=1e-4)
    assert [tree.nodes[i].token for i in tree.best] == [BOS_ID, b, c, EOS_ID]


# --- prefixes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_prefix_is_forced_then_decoding_goes_on(model: Seq2Seq, src: Tensor, decoder: str) -> None:
    prefixes = [[9, 8, 7], [], [11], [12, 13]]
    if decoder == "greedy":
        out = greedy_decode(model, src, max_length=10, prefix=prefixes)
    else:
        out = beam_search(model, src, beam_size=3, max_length=10, prefix=prefixes)
    assert out.forced_tokens == [3, 0, 1, 2]
    for hyp, p in zip(out.hypotheses(), prefixes, strict=True):
        assert hyp.tokens[: len(p)] == p and hyp.forced_tokens == len(p)
        assert len(hyp.tokens) > len(p)
    # the forced tokens' log-probabilities and all attention are those of the whole output
    forced = score_targets(model, src, out.tokens)
    torch.testing.assert_close(out.token_logprobs, forced.token_logprobs, atol=1e-5, rtol=1e-5)
    for mine, theirs in zip(out.hypotheses(), forced.hypotheses(), strict=True):
        for name in ("cross", "decoder_self", "encoder_self"):
            x, y = getattr(mine, name), getattr(theirs, name)
            if x is not None:
                torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


def test_prefix_with_beam_one_is_greedy_with_prefix(model: Seq2Seq, src: Tensor) -> None:
    prefixes = [[9], [10, 11], [], [12]]
    greedy = greedy_decode(model, src, max_length=9, prefix=prefixes)
    beam = beam_search(model, src, beam_size=1, max_length=9, prefix=prefixes)
    assert torch.equal(beam.tokens, greedy.tokens)
    torch.testing.assert_close(beam.scores, greedy.scores, atol=1e-4, rtol=1e-5)


def test_prefix_leads_into_another_branch(scripted: Callable[..., Seq2Seq]) -> None:
    table = {
        (): {a: 0.6, b: 0.4},
        (a,): {EOS_ID: 1.0},
        (b,): {c: 0.9, a: 0.1},
        (b, c): {EOS_ID: 1.0},
    }
    src = torch.tensor([[7, 7, 3]])
    assert greedy_decode(scripted(table), src).tokens.tolist() == [[a, EOS_ID]]
    out = greedy_decode(scripted(table), src, prefix=[[b]])
    assert out.tokens.tolist() == [[b, c, EOS_ID]]
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.4 * 0.9)]), atol=1e-4, rtol=0)
    beam = beam_search(scripted(table), src, beam_size=2, prefix=[[b]], return_tree=True)
    assert beam.tokens.tolist() == [[b, c, EOS_ID]]
    tree = beam.hypotheses()[0].tree
    assert tree is not None and [n.token for n in tree.nodes if n.step == 1] == [b]


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ([[EOS_ID]], "not an ordinary target token"),
        ([[0]], "not an ordinary"),
        ([[a], [b]], "2 prefixes for 1"),
        ([[a] * 6], "leaves no room"),
    ],
)
def test_bad_prefixes_are_refused(model: Seq2Seq, prefix: list[list[int]], message: str) -> None:
    src = torch.tensor([[7, 8, EOS_ID]])
    for decode in (greedy_decode, beam_search):
        with pytest.raises(ValueError, match=message):
            decode(model, src, prefix=prefix, max_length=6)


# --- coverage ------------------------------------------------------------------------------------


def test_gnmt_coverage_penalty_formula() -> None:
    coverage = torch.tensor([[0.5, 2.0, 1.0, 0.0], [0.25, 0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    got = gnmt_coverage(coverage, mask, beta=0.2)
    want = torch.tensor([0.2 * math.log(0.5), 0.2 * (math.log(0.25) + math.log(0.5))])
    torch.testing.assert_close(got, want)


def test_coverage_penalty_prefers_the_hypothesis_that_covers_the_source(
    scripted: Callable[..., Seq2Seq],
) -> None:
    """The scripted model attends, at each step, to position sum(prefix) mod 3. "a </s>" attends
    to positions 0 and 1 and never to 2; "a a </s>" attends to 0, 1 and 2 (4 + 4 = 8). The first
    is likelier, so it wins without coverage; with beta = 1 the covering one wins."""
    table = {(): {a: 1.0}, (a,): {EOS_ID: 0.6, a: 0.4}, (a, a): {EOS_ID: 1.0}}
    src = torch.tensor([[7, 7, 3]])
    plain = beam_search(scripted(table), src, beam_size=2, alpha=0.0)
    assert plain.hypotheses()[0].tokens == [a, EOS_ID]
    covered = beam_search(
        scripted(table), src, beam_size=2, alpha=0.0, coverage_penalty=1.0, return_tree=True
    )
    hyp = covered.hypotheses()[0]
    assert hyp.tokens == [a, a, EOS_ID]
    assert hyp.score == pytest.approx(math.log(0.4), abs=1e-4)  # the raw log-probability
    assert hyp.tree is not None
    ranked = [h.tokens for h in hyp.tree.hypotheses]
    # both found, the likelier one ranked below the covering one (a hypothesis through one of the
    # table's equally unlikely 1e-6 words may rank between them, which one depends on ties)
    assert ranked[0] == [a, a, EOS_ID] and [a, EOS_ID] in ranked
    # without weights asked for, the penalty still sees the attention
    quiet = beam_search(
        scripted(table), src, beam_size=2, alpha=0.0, coverage_penalty=1.0, need_weights=False
    )
    assert quiet.hypotheses()[0].tokens == [a, a, EOS_ID] and quiet.cross is None


def test_coverage_keeps_the_attention_of_the_hypothesis(model: Seq2Seq, src: Tensor) -> None:
    if "cross" not in model.config.attention_kinds:
        with pytest.raises(ValueError, match="needs a model with cross-attention"):
            beam_search(model, src, beam_size=2, coverage_penalty=0.5)
        return
    out = beam_search(model, src, beam_size=3, max_length=8, coverage_penalty=0.5)
    forced = score_targets(model, src, out.tokens)
    torch.testing.assert_close(out.token_logprobs, forced.token_logprobs, atol=1e-5, rtol=1e-5)
    for mine, theirs in zip(out.hypotheses(), forced.hypotheses(), strict=True):
        assert mine.cross is not None and theirs.cross is not None
        torch.testing.assert_close(mine.cross, theirs.cross, atol=1e-5, rtol=1e-5)
