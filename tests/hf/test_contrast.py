"""Contrastive attribution on an imported Marian (#45.7): its vocabulary is renumbered (Marian's
eos 0 / pad last become attnscope's 3 / 0, and its ids are not SentencePiece's), so the foil
must be looked up in the model's own vocabulary. The served difference is checked against the
logits of the loaded model computed here, and the foil is one whose SentencePiece id differs."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from builders import marian_folder

from attnscope.hf.importer import import_model
from attnscope.repository import load_model_folder
from attnscope.testing import running_server

TEXT = "A man in a blue shirt is standing on a ladder."


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def test_contrastive_foil_is_the_models_own_token(tmp_path: Path) -> None:
    source = marian_folder(tmp_path / "source")
    out = import_model(str(source), tmp_path / "models" / "en-de-marian", dtype="float32").folder
    loaded = load_model_folder(out)
    tok = loaded.tokenizer
    sp = spm.SentencePieceProcessor(model_file=str(source / "source.spm"))
    with running_server(tmp_path / "models", tmp_path / "server.log") as url:
        plain = _post(url + "/api/attribution", {"model": "en-de-marian", "text": TEXT, "beam_size": 1})
        target = [tok.id_of(p) for p in plain["target_tokens"]]
        position = 1
        # a foil whose SentencePiece id is another piece's id in the model (the old lookup's error)
        foil = next(
            p for p in tok.pieces(range(4, tok.vocab_size))
            if tok.id_of(p) not in (None, target[position]) and sp.piece_to_id(p) not in (0, tok.id_of(p))
        )
        body = {"model": "en-de-marian", "text": TEXT, "beam_size": 1, "contrast": {"position": position, "token": foil}}
        answer = _post(url + "/api/attribution", body)["contrastive"]
    assert answer["foil"] == foil and answer["token"] == plain["target_tokens"][position]
    source_ids = [tok.id_of(p) for p in plain["source_tokens"]]
    with torch.no_grad():
        logits = loaded.model(torch.tensor([source_ids]), torch.tensor([[loaded.config.bos_id, *target[:position]]])).logits
    step = logits[0, -1]
    expected = float(step[target[position]] - step[tok.id_of(foil)])
    wrong = float(step[target[position]] - step[sp.piece_to_id(foil)])
    assert abs(answer["difference"] - expected) < 1e-4
    assert abs(expected - wrong) > 1e-3  # the SentencePiece id would have given another number
