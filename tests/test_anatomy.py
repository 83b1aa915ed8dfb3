"""The anatomy of attention: the recorded raw scores are the ones behind the weights (softmax of
each score row equals the attention row the decoders returned) for every score function, the
self-attentive RNN and the Transformer; contexts are the weighted sums; alternatives are the
model's top choices; recording is off unless asked for and local to its thread."""

from __future__ import annotations

import threading

import pytest
import torch

from attnscope.anatomy import anatomy
from attnscope.decoding import beam_search, greedy_decode
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import EOS_ID, SCORES
from attnscope.nn.factory import build_model
from attnscope.nn.recording import ScoreRecorder, record, recording
from attnscope.testing import tiny_config

VOCAB = 40
KINDS = [("rnn", s) for s in SCORES if s != "none"] + [("self_attentive_rnn", "additive"), ("transformer", "additive")]
SOURCE = [5, 9, 13, 7, 22, 31, EOS_ID]

torch.set_num_threads(1)


def tiny(architecture: str, score: str) -> Seq2Seq:
    torch.manual_seed(0)
    return build_model(tiny_config(architecture, score, VOCAB)).eval()


@pytest.mark.parametrize(("architecture", "score"), KINDS, ids=[f"{a}-{s}" for a, s in KINDS])
@pytest.mark.parametrize("beam", [1, 3])
def test_softmax_of_scores_is_the_decoders_attention(architecture: str, score: str, beam: int) -> None:
    model = tiny(architecture, score)
    src = torch.tensor([SOURCE])
    if beam == 1:
        out = greedy_decode(model, src, max_length=8)
    else:
        out = beam_search(model, src, beam_size=beam, max_length=8)
    (hyp,) = out.hypotheses()
    result = anatomy(model, SOURCE, hyp.tokens)
    assert set(result.scores) == set(model.config.attention_kinds)
    for kind, scores in result.scores.items():
        weights = getattr(hyp, kind)
        assert scores.shape == weights.shape, kind
        torch.testing.assert_close(scores.softmax(-1), weights, atol=1e-5, rtol=0)
        finite = torch.isfinite(scores)
        assert bool((weights[~finite] == 0).all()), kind  # masked keys: -inf, zero weight
        assert bool(finite.any(-1).all()), kind  # every row has a real key
    if architecture == "self_attentive_rnn":  # a state attends over its own past only
        enc_scores = result.scores["encoder_self"][0, 0]
        above = torch.ones_like(enc_scores, dtype=torch.bool).triu(1)
        assert bool(torch.isinf(enc_scores[above]).all()) and bool(torch.isfinite(enc_scores[~above]).all())


def test_rnn_scores_are_the_score_function_itself() -> None:
    """dot: sᵀh of the previous decoder state and each encoder state, not a rescaled copy."""
    model = tiny("rnn", "dot")
    (hyp,) = greedy_decode(model, torch.tensor([SOURCE]), max_length=5).hypotheses()
    result = anatomy(model, SOURCE, hyp.tokens)
    enc = model.encode(torch.tensor([SOURCE]))
    first = enc.memory[0] @ enc.final[0]  # s_0 is the encoder's final state (S,)
    torch.testing.assert_close(result.scores["cross"][0, 0, 0], first)


def test_transformer_scores_are_q_dot_k_over_sqrt_dk() -> None:
    model = tiny("transformer", "additive")
    (hyp,) = greedy_decode(model, torch.tensor([SOURCE]), max_length=5).hypotheses()
    result = anatomy(model, SOURCE, hyp.tokens)
    layer = model.encoder_layers[0]
    x = model._embed(torch.tensor([SOURCE]))
    y = layer.res_attn.norm(x) if layer.res_attn.pre_norm else x
    attn = layer.self_attn
    q, k = attn.split(attn.q_proj(y)), attn.split(attn.k_proj(y))
    expected = (q @ k.transpose(-2, -1))[0] / attn.head_dim**0.5  # (H, S, S)
    torch.testing.assert_close(result.scores["encoder_self"][0], expected)


def test_contexts_are_weighted_sums_and_alternatives_the_top_choices() -> None:
    model = tiny("rnn", "general")
    (hyp,) = greedy_decode(model, torch.tensor([SOURCE]), max_length=6).hypotheses()
    result = anatomy(model, SOURCE, hyp.tokens, top_k=3)
    enc = model.encode(torch.tensor([SOURCE]))
    assert result.contexts is not None and result.context_norms is not None
    expected = hyp.cross[0, 0] @ enc.memory[0]  # (T, H)
    torch.testing.assert_close(result.contexts[0, 0], expected, atol=1e-5, rtol=0)
    assert result.context_norms.shape == (1, 1, len(hyp.tokens))
    assert len(result.alternatives) == len(hyp.tokens)
    for step, (token, choices) in enumerate(zip(hyp.tokens, result.alternatives, strict=True)):
        ids = [i for i, _ in choices]
        assert ids[0] == token  # greedy picked the most likely token
        logprobs = [lp for _, lp in choices]
        assert logprobs == sorted(logprobs, reverse=True) and len(ids) == 3
        assert logprobs[0] == pytest.approx(hyp.token_logprobs[step], abs=1e-5)


def test_no_attention_model_has_no_scores() -> None:
    model = tiny("rnn", "none")
    result = anatomy(model, SOURCE, [7, EOS_ID])
    assert result.scores == {} and result.contexts is None


def test_recording_is_opt_in_and_local_to_its_thread() -> None:
    module = torch.nn.Linear(1, 1)
    record(module, torch.zeros(2), None, torch.zeros(2))  # nothing active: nothing kept, no error
    seen: list[ScoreRecorder] = []

    def other_thread() -> None:
        with recording() as mine:
            record(module, torch.ones(3), None, torch.ones(3))
            seen.append(mine)

    with recording() as recorder:
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        record(module, torch.tensor([1.0, 2.0]), torch.tensor([True, False]), torch.zeros(1))
    assert [r.scores.tolist() for r in recorder.of(module)] == [[1.0, float("-inf")]]
    assert [r.scores.tolist() for r in seen[0].of(module)] == [[1.0, 1.0, 1.0]]
