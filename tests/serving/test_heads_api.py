"""Head options of /api/translate and /api/align: `alignment` returns a Pharaoh word alignment,
`disable_heads` switches heads off (none off changes nothing, a whole layer off changes the
output), and bad heads are 422 errors naming the field."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from attnscope.alignment.hard import Side, hard_alignment, word_level_attention
from attnscope.alignment.links import format_pharaoh, parse_pharaoh
from attnscope.alignment.words import moses_words
from attnscope.nn.config import EOS_ID
from attnscope.repository import load_model_folder, read_card, write_card

from .conftest import make_client

TEXT = "A man is riding a bicycle."
TF = "en-de-transformer"


def post(client: TestClient, path: str, **body: Any) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.mark.parametrize("choice", ["average", {"kind": "cross", "layer": 1, "head": 1}])
@pytest.mark.parametrize("model", [TF, "en-de-rnn-additive", "en-de-self-attentive"])
def test_translate_returns_a_pharaoh_alignment_that_round_trips(client: TestClient, model: str, choice: Any) -> None:
    if model != TF and choice != "average":
        choice = {"kind": "cross", "layer": 0, "head": 0}
    answer = post(client, "/api/translate", model=model, text=TEXT, beam_size=1, max_length=8, alignment=choice)
    wa = answer["word_alignment"]
    assert wa["head"] == (choice if choice == "average" else {**choice, "rows": "produces"})
    assert wa["source_words"] == moses_words(TEXT, "en")
    assert wa["target_words"] == moses_words(answer["translation"], "de")
    links = parse_pharaoh(wa["pharaoh"])
    assert format_pharaoh(links) == wa["pharaoh"]  # the text is canonical: parse -> format is identity
    assert sorted(j for _, j in links) == list(range(len(wa["target_words"])))  # one link per target word
    assert all(0 <= i < len(wa["source_words"]) for i, _ in links)


def test_align_reads_the_alignment_of_the_given_target(client: TestClient) -> None:
    target = "Ein Mann fährt Fahrrad."
    answer = post(client, "/api/align", model=TF, text=TEXT, target=target, alignment="average")
    wa = answer["word_alignment"]
    assert wa["target_words"] == ["Ein", "Mann", "fährt", "Fahrrad", "."]
    assert len(parse_pharaoh(wa["pharaoh"])) == 5
    assert post(client, "/api/align", model=TF, text=TEXT, target=target)["word_alignment"] is None


def test_a_head_trained_on_reading_rows_aligns_by_them_unless_asked_otherwise(
    tiny_models_dir: Path, tmp_path: Path
) -> None:
    """A card whose supervised head was trained on the rows that read each word (Shift-Att) makes
    that the head's default; other heads, and an explicit "rows", are as asked. The links are
    the ones the reading rows of the returned attention give."""
    folder = tmp_path / TF
    shutil.copytree(tiny_models_dir / TF, folder)
    card, _ = read_card(folder)
    card["training"] = {**(card.get("training") or {}), "alignment_supervision": {"layer": 1, "head": 0, "rows": "reads"}}
    write_card(folder, card)
    target = "Ein Mann fährt Fahrrad."
    supervised = {"kind": "cross", "layer": 1, "head": 0}
    with make_client(tmp_path) as client:
        def aligned(choice: Any) -> dict[str, Any]:
            return post(client, "/api/align", model=TF, text=TEXT, target=target, alignment=choice)

        default, reads, produces = aligned(supervised), aligned({**supervised, "rows": "reads"}), aligned({**supervised, "rows": "produces"})
        other = aligned({"kind": "cross", "layer": 0, "head": 1})
    assert default["word_alignment"] == reads["word_alignment"]
    assert reads["word_alignment"]["head"] == {**supervised, "rows": "reads"}
    assert produces["word_alignment"]["head"]["rows"] == other["word_alignment"]["head"]["rows"] == "produces"
    loaded = load_model_folder(folder)
    cross = torch.tensor(reads["attention"]["cross"])
    for answer, rows in ((reads, "reads"), (produces, "produces")):
        want = hard_alignment(word_level_attention(
            loaded.tokenizer, source=Side(TEXT, loaded.tokenizer.encode(TEXT) + [EOS_ID], "en"),
            target=Side(target, loaded.tokenizer.encode(target) + [EOS_ID], "de"), cross=cross, choice=(1, 0),
            rows=rows,  # type: ignore[arg-type]
        ))
        assert answer["word_alignment"]["pharaoh"] == want.pharaoh


@pytest.mark.parametrize("path", ["/api/translate", "/api/align"])
def test_disabling_no_head_changes_nothing_and_a_whole_layer_changes_the_output(client: TestClient, path: str) -> None:
    body: dict[str, Any] = {"model": TF, "text": TEXT}
    if path == "/api/translate":
        body.update(beam_size=1, max_length=8)
    else:
        body["target"] = "Ein Mann fährt Fahrrad."
    base = post(client, path, **body)
    same = post(client, path, **body, disable_heads=[])
    assert same["attention"] == base["attention"] and same["logprob"] == base["logprob"]
    for kind in ("cross", "encoder_self", "decoder_self"):
        off = [{"kind": kind, "layer": 0, "head": h} for h in range(2)]
        changed = post(client, path, **body, disable_heads=off)
        assert changed["disabled_heads"] == off
        assert changed["logprob"] != base["logprob"] or changed["translation"] != base["translation"]


def test_the_rnn_cross_head_can_be_switched_off(client: TestClient) -> None:
    body = {"model": "en-de-rnn-additive", "text": TEXT, "target": "Ein Mann fährt Fahrrad."}
    base = post(client, "/api/align", **body)
    off = post(client, "/api/align", **body, disable_heads=[{"kind": "cross", "layer": 0, "head": 0}])
    assert off["logprob"] != base["logprob"]
    # The first step's weights come before any context is used; later ones follow the changed states.
    assert off["attention"]["cross"][0][0][0] == base["attention"]["cross"][0][0][0]
    assert off["attention"]["cross"] != base["attention"]["cross"]


@pytest.mark.parametrize(
    ("model", "extra", "field", "message"),
    [
        (TF, {"disable_heads": [{"kind": "cross", "layer": 0, "head": 0}, {"kind": "cross", "layer": 9, "head": 0}]},
         "disable_heads[1]", "no layer 9"),
        (TF, {"disable_heads": [{"kind": "cross", "layer": 0, "head": 5}]}, "disable_heads[0]", "no head 5"),
        ("en-de-rnn-additive", {"disable_heads": [{"kind": "decoder_self", "layer": 0, "head": 0}]},
         "disable_heads[0]", "no 'decoder_self' attention"),
        (TF, {"alignment": {"kind": "cross", "layer": 0, "head": 7}}, "alignment", "no head 7"),
        ("en-de-rnn-none", {"alignment": "average"}, "alignment", "no cross-attention"),
    ],
)
def test_heads_the_model_lacks_are_named(client: TestClient, model: str, extra: dict[str, Any], field: str, message: str) -> None:
    response = client.post("/api/translate", json={"model": model, "text": TEXT, **extra})
    assert response.status_code == 422, response.text
    body = response.json()
    assert [e["field"] for e in body["errors"]] == [field]
    assert message in body["detail"]


@pytest.mark.parametrize(
    "extra",
    [
        {"alignment": {"kind": "encoder_self", "layer": 0, "head": 0}},
        {"alignment": "median"},
        {"alignment": {"kind": "cross", "layer": 0, "head": 0, "rows": "next"}},
        {"disable_heads": [{"kind": "cross", "layer": -1, "head": 0}]},
        {"disable_heads": [{"kind": "cross", "layer": 0}]},
        {"disable_heads": {"kind": "cross", "layer": 0, "head": 0}},
    ],
)
def test_malformed_head_fields_are_422(client: TestClient, extra: dict[str, Any]) -> None:
    response = client.post("/api/translate", json={"model": TF, "text": TEXT, **extra})
    assert response.status_code == 422
    assert response.json()["errors"]


SHIPPED = Path(__file__).resolve().parents[2] / "models"


def test_on_a_shipped_transformer_layers_off_change_the_translation(tmp_path: Path) -> None:
    """What a user sees on the page: switch cross heads off and the German changes. The shipped
    (distilled) en-de Transformer is redundant across layers: with one layer's eight cross heads
    off it still writes the same words, less sure of them; with two layers off the words change."""
    (tmp_path / TF).symlink_to(SHIPPED / TF)
    with make_client(tmp_path) as client:
        body = {"model": TF, "text": "A little girl climbs into a wooden playhouse.", "beam_size": 1}
        base = post(client, "/api/translate", **body)
        one = post(client, "/api/translate", **body, disable_heads=[{"kind": "cross", "layer": 0, "head": h} for h in range(8)])
        two = post(client, "/api/translate", **body, disable_heads=[{"kind": "cross", "layer": la, "head": h} for la in (0, 1) for h in range(8)])
    assert one["logprob"] != pytest.approx(base["logprob"], abs=1e-3)
    assert two["translation"] != base["translation"]


def test_alternatives_are_computed_with_the_same_heads_off_as_the_decode(client: TestClient) -> None:
    """Greedy decoding emits the best token at each position, so the best alternatives of the
    second, teacher-forced pass add up to the answer's log-probability, also with heads switched
    off (which changes it): that pass must run with the same heads off as the decode."""
    off = [{"kind": kind, "layer": 0, "head": h} for kind in ("cross", "decoder_self") for h in range(2)]
    totals = []
    for disabled in ([], off):
        answer = post(client, "/api/translate", model=TF, text=TEXT, beam_size=1, max_length=8, alternatives=2,
                      disable_heads=disabled)
        best = [step[0] for step in answer["alternatives"]]
        assert [b["token"] for b in best] == answer["target_tokens"]
        assert sum(b["logprob"] for b in best) == pytest.approx(answer["logprob"], abs=1e-4), disabled
        totals.append(answer["logprob"])
    assert totals[0] != pytest.approx(totals[1], abs=1e-3)  # the heads matter
