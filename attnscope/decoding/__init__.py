"""Decoding: greedy and beam search with attention that follows the chosen hypothesis, and
teacher-forced scoring of a given target. Knows nothing of training or the web."""

from attnscope.decoding.beam import beam_search
from attnscope.decoding.greedy import greedy_decode
from attnscope.decoding.output import DecodeOutput, DecodeStopped, Hypothesis
from attnscope.decoding.plan import DecodeOptions, DecodePlan, make_plan
from attnscope.decoding.scoring import score_targets
from attnscope.decoding.tree import BeamNode, FinishedHypothesis, SearchTree

__all__ = [
    "BeamNode",
    "SearchTree",
    "DecodeOptions",
    "DecodeOutput",
    "DecodePlan",
    "DecodeStopped",
    "FinishedHypothesis",
    "Hypothesis",
    "beam_search",
    "greedy_decode",
    "make_plan",
    "score_targets",
]
