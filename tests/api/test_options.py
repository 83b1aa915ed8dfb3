"""Every option of the REST bodies, given the same way to ``attnscope.load()``'s model and to
``attnscope.Client``'s, gives the same answer (or the same error) over a real server, and each one
visibly takes effect: a door that dropped an option would answer the default there instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import attnscope
from attnscope.api.local import LocalModel
from attnscope.api.results import AttributionResult, Result

MODEL = "en-de-transformer"
TEXT = "A man is riding 3 bicycles."
BASE: dict[str, Any] = {"beam_size": 2, "max_length": 8}
TREE: dict[str, Any] = {"return_beam": True, "protect": False}  # protecting numbers turns the tree off

# option -> (the options, the options of the answer to compare with: it must differ)
TRANSLATE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "sampling": ({"beam_size": 1, "sampling": {"temperature": 0.7, "top_k": 5, "seed": 4}}, {"beam_size": 1}),
    "coverage_penalty": ({"coverage_penalty": 0.4, **TREE}, TREE),
    "prefix": ({"prefix": "Ein"}, {}),
    "protect": ({"protect": False}, {}),  # on by default
    "return_scores": ({"return_scores": True}, {}),
    "alternatives": ({"alternatives": 3}, {}),
    "return_beam": (TREE, {"protect": False}),
    "disable_heads": ({"disable_heads": [("cross", 0, 1)]}, {}),
    "alignment": ({"alignment": "average"}, {}),
    "attention+precision": ({"attention": ["cross"], "precision": 2}, {}),
    "explain": ({"explain": ["rollout"]}, {}),
    "max_length": ({"max_length": 3}, {}),
}  # fmt: skip


@pytest.fixture(scope="module")
def doors(local_models: dict[str, LocalModel], api_server: str) -> tuple[LocalModel, Any]:
    return local_models[MODEL], attnscope.Client(api_server).load(MODEL)


def outcome(call: Callable[[], Any]) -> Any:
    """The answer's JSON without ``timing_ms`` (a list for a batch), or the error's class and text."""
    try:
        got = call()
    except attnscope.APIError as err:
        return ("error", type(err).__name__, str(err))
    answers = [r.to_dict() for r in got] if isinstance(got, list) else [got.to_dict()]
    for answer in answers:
        answer.pop("timing_ms", None)
    return answers


@pytest.mark.parametrize("name", list(TRANSLATE))
def test_translate_option_reaches_both_doors(doors: tuple[LocalModel, Any], name: str) -> None:
    local, remote = doors
    options, baseline = ({**BASE, **o} for o in TRANSLATE[name])
    mine, theirs = outcome(lambda: local.translate(TEXT, **options)), outcome(lambda: remote.translate(TEXT, **options))
    assert mine[0] != "error" and mine == theirs
    assert theirs != outcome(lambda: remote.translate(TEXT, **baseline))  # it took effect


def test_batch_align_and_attribution_options(doors: tuple[LocalModel, Any]) -> None:
    local, remote = doors
    texts = ["A dog runs.", TEXT]
    sampled = {"beam_size": 1, "max_length": 6, "sampling": {"temperature": 2.0, "top_p": 0.9, "seed": 11}}
    batch = outcome(lambda: remote.translate_batch(texts, **sampled))
    assert outcome(lambda: local.translate_batch(texts, **sampled)) == batch
    assert batch != outcome(lambda: remote.translate_batch(texts, beam_size=1, max_length=6))
    aligned = {"return_scores": True, "alternatives": 2, "disable_heads": [("encoder_self", 0, 0)]}
    mine = outcome(lambda: local.align(TEXT, "Ein Mann.", **aligned))
    assert mine == outcome(lambda: remote.align(TEXT, "Ein Mann.", **aligned))
    assert mine[0]["attention_scores"] is not None and len(mine[0]["alternatives"][0]) == 2
    contrast = {"steps": 3, "contrast": {"position": 0, "token": "hr"}}
    a: AttributionResult = local.attribute(TEXT, target="Ein Mann.", **contrast)
    b: AttributionResult = remote.attribute(TEXT, target="Ein Mann.", **contrast)
    assert a.to_dict() == b.to_dict() and a["contrastive"]["foil"] == "hr"


@pytest.mark.parametrize(
    "options",
    [
        {"sampling": {"temperature": 0.7}},  # the seed is required
        {"sampling": {"temperature": 0.7, "seed": 1}, "beam_size": 3},  # sampling draws one output
        {"source_lang": "xx"},  # not a multilingual model
        {"max_length": 0},
    ],
    ids=["no-seed", "sampled-beam", "language", "max_length"],
)
def test_the_same_error_through_both_doors(doors: tuple[LocalModel, Any], options: dict[str, Any]) -> None:
    local, remote = doors
    mine = outcome(lambda: local.translate(TEXT, **options))
    assert mine[0] == "error" and mine == outcome(lambda: remote.translate(TEXT, **options))


def test_results_hold_the_request(doors: tuple[LocalModel, Any]) -> None:
    local, remote = doors
    sampled = {"beam_size": 1, "sampling": {"temperature": 0.5, "seed": 2}}
    for result in (local.translate(TEXT, **sampled), remote.translate(TEXT, **sampled)):
        assert isinstance(result, Result) and result.request["sampling"] == {"temperature": 0.5, "seed": 2}


def test_on_demand_attention_is_fetched_when_read(doors: tuple[LocalModel, Any]) -> None:
    """``attention="on_demand"``: the answer carries an id and shapes; each door reads the
    matrices where the answer was made (the store in process, GET /api/attention/... over HTTP)
    on first use, and they are the inline answer's numbers."""
    local, remote = doors
    options: dict[str, Any] = {**BASE, "precision": 4}
    inline = local.translate(TEXT, **options)
    for door in (local, remote):
        lazy = door.translate(TEXT, **options, attention="on_demand")
        assert lazy.on_demand and lazy.to_dict()["attention"] == {} and lazy.kinds == inline.kinds
        assert "cross 2×2×" in repr(lazy)
        for kind in inline.kinds:
            np.testing.assert_array_equal(lazy.attention[kind], inline.attention[kind])
        assert lazy.inline().to_dict()["attention"] == inline.to_dict()["attention"]
        frame = lazy.to_pandas(kinds=["cross"])
        assert len(frame) == inline.attention["cross"].size
