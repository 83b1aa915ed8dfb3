"""``attnscope analyze`` end to end on tiny models: the Parquet files and their rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from attnscope.alignment.corpus import AlignedPair
from attnscope.alignment.evaluate import score_heads
from attnscope.alignment.links import parse_pharaoh
from attnscope.alignment.words import word_spans
from attnscope.analysis.corpus import read_lines
from attnscope.analysis.roles import ROLES
from attnscope.analysis.rows import COLUMNS
from attnscope.analysis.runner import HEADS_FILE, META_FILE, ROWS_FILE, AnalyzeOptions, analyze
from attnscope.cli import main
from attnscope.repository import load_model_folder


def run(tmp_path: Path, model: Path, corpus: dict[str, Path], **extra: object) -> dict[str, object]:
    options = AnalyzeOptions(model=model, corpus=corpus["corpus"], out=tmp_path / "out", progress=False, **extra)  # type: ignore[arg-type]
    return analyze(options)


def test_teacher_forced_transformer_rows(tmp_path: Path, tiny_models_dir: Path, analysis_corpus: dict[str, Path]) -> None:
    model = tiny_models_dir / "en-de-transformer"
    result = run(tmp_path, model, analysis_corpus, references=analysis_corpus["references"],
                 alignments=analysis_corpus["alignments"], batch_size=16)  # fmt: skip
    rows = pq.read_table(tmp_path / "out" / ROWS_FILE).to_pylist()
    assert list(pq.read_schema(tmp_path / "out" / ROWS_FILE).names) == list(COLUMNS)
    # 40 sentences × 3 kinds × 2 layers × 2 heads, each once, sorted.
    keys = [(r["sentence"], r["kind"], r["layer"], r["head"]) for r in rows]
    assert len(rows) == result["rows"] == 40 * 3 * 2 * 2 and keys == sorted(set(keys))
    assert {r["sentence"] for r in rows} == set(range(40))
    loaded = load_model_folder(model)
    sources, refs = read_lines(analysis_corpus["corpus"]), read_lines(analysis_corpus["references"])
    for r in rows:
        s, t = len(loaded.tokenizer.encode(sources[r["sentence"]])) + 1, len(loaded.tokenizer.encode(refs[r["sentence"]])) + 1
        assert (r["queries"], r["keys"]) == {"encoder_self": (s, s), "decoder_self": (t, t), "cross": (t, s)}[r["kind"]]
        assert 0 <= r["entropy"] <= math.log(r["keys"]) + 1e-4 and 0 < r["max_weight"] <= 1 + 1e-6
        for name in ("eos_share", "punct_share", "rare_share", "prev_share", "same_share", "next_share"):
            assert r[name] is None or -1e-6 <= r[name] <= 1 + 1e-6
        assert (r["prev_share"] is None) == (r["kind"] == "cross")
        assert (r["rare_share"] is None) == (r["kind"] == "decoder_self")
        assert (r["alignment_f1"] is None) == (r["kind"] != "cross")
        if r["kind"] == "decoder_self":
            assert r["next_share"] == pytest.approx(0.0, abs=1e-6)  # causal: nothing on the next input
    heads = pq.read_table(tmp_path / "out" / HEADS_FILE).to_pylist()
    assert len(heads) == 12 and all(h["role"] in ROLES and h["sentences"] == 40 for h in heads)
    meta = json.loads((tmp_path / "out" / META_FILE).read_text())
    assert meta["mode"] == "teacher-forced" and meta["sentences"] == 40 and len(meta["roles"]) == 12


def test_alignment_f1_matches_evaluate_alignment(tmp_path: Path, tiny_models_dir: Path, analysis_corpus: dict[str, Path]) -> None:
    """Per-head corpus F1 is the number `evaluate --alignment` gives for the same links."""
    model = tiny_models_dir / "en-de-transformer"
    run(tmp_path, model, analysis_corpus, references=analysis_corpus["references"], alignments=analysis_corpus["alignments"])
    heads = [h for h in pq.read_table(tmp_path / "out" / HEADS_FILE).to_pylist() if h["kind"] == "cross"]
    sources, refs = read_lines(analysis_corpus["corpus"]), read_lines(analysis_corpus["references"])
    references = [
        AlignedPair(parse_pharaoh(line), word_spans(s, "en"), word_spans(t, "de"))
        for s, t, line in zip(sources, refs, read_lines(analysis_corpus["alignments"]), strict=True)
    ]
    expected = score_heads(load_model_folder(model), list(zip(sources, refs, strict=True)), references)["f1"]
    assert [[h["alignment_f1"] for h in heads if h["layer"] == layer] for layer in range(2)] == expected


def test_greedy_rnn_has_cross_rows_only(tmp_path: Path, tiny_models_dir: Path, analysis_corpus: dict[str, Path]) -> None:
    result = run(tmp_path, tiny_models_dir / "en-de-rnn-additive", analysis_corpus, limit=12)
    rows = pq.read_table(tmp_path / "out" / ROWS_FILE).to_pylist()
    assert result["mode"] == "greedy" and len(rows) == 12
    assert {(r["kind"], r["layer"], r["head"]) for r in rows} == {("cross", 0, 0)}
    assert all(r["alignment_f1"] is None for r in rows)


def test_cli_writes_and_reports(tmp_path: Path, tiny_models_dir: Path, analysis_corpus: dict[str, Path],
                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "cli"
    code = main(["analyze", str(tiny_models_dir / "en-de-transformer"), "--corpus", str(analysis_corpus["corpus"]),
                 "--out", str(out), "--limit", "5", "--quiet"])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out)["sentences"] == 5
    assert pq.read_table(out / ROWS_FILE).num_rows == 5 * 12


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--alignments", "LINKS"], "--alignments needs --references"),
        (["--references", "MISSING"], "no such file"),
        (["--limit", "0"], "--limit must be positive"),
    ],
)
def test_cli_bad_input_is_one_clear_line(tmp_path: Path, tiny_models_dir: Path, analysis_corpus: dict[str, Path],
                                         capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:  # fmt: skip
    extra = [str(analysis_corpus["alignments"]) if a == "LINKS" else str(tmp_path / a) if a == "MISSING" else a for a in extra]
    code = main(["analyze", str(tiny_models_dir / "en-de-transformer"), "--corpus", str(analysis_corpus["corpus"]),
                 "--out", str(tmp_path / "x"), "--quiet", *extra])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_a_model_without_attention_is_refused(tmp_path: Path, tiny_models_dir: Path, analysis_corpus: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="has no attention to analyse"):
        run(tmp_path, tiny_models_dir / "en-de-rnn-none", analysis_corpus)
    assert not (tmp_path / "out").exists()


def test_bad_alignment_line_names_file_and_line(tmp_path: Path, tiny_models_dir: Path, analysis_corpus: dict[str, Path]) -> None:
    links = tmp_path / "bad.txt"
    lines = analysis_corpus["alignments"].read_text().splitlines()
    links.write_text("\n".join(lines[:2] + ["0-0 zz"] + lines[3:]) + "\n")
    with pytest.raises(ValueError, match=rf"{links.name}:3: not a Pharaoh link"):
        run(tmp_path, tiny_models_dir / "en-de-transformer", analysis_corpus,
            references=analysis_corpus["references"], alignments=links)  # fmt: skip


def test_align_corpus_lines_are_read_with_their_spans(tmp_path: Path, tiny_models_dir: Path) -> None:
    """A file from ``attnscope align-corpus`` (links, source spans, target spans) works as
    --alignments: its spans, not a re-tokenisation, name the words."""
    from attnscope.alignment.corpus import write_references
    from attnscope.analysis.corpus import read_items
    from attnscope.text.tokenizer import Tokenizer

    spans = ([(0, 5), (6, 11)], [(0, 8), (9, 15)])  # deliberately not Moses words
    (tmp_path / "s.txt").write_text("A man runs.\n")
    (tmp_path / "r.txt").write_text("Ein Mann rennt.\n")
    write_references(tmp_path / "links.tsv.gz", [AlignedPair({(0, 0), (1, 1)}, *spans)])
    tokenizer = Tokenizer.load(tiny_models_dir / "en-de-transformer" / "tokenizer.model")
    (item,) = read_items(tokenizer, tmp_path / "s.txt", references=tmp_path / "r.txt", alignments=tmp_path / "links.tsv.gz")
    assert item.links == [(0, 0), (1, 1)] and (item.source_words, item.target_words) == spans
    assert item.reference == "Ein Mann rennt." and item.line == 0
