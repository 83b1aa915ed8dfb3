"""``evaluate --ablate --ray``: head importance on a local Ray (one actor, one thread) equals the
in-process ``ablation_bleu`` (one thread too), cell for cell, on a tiny Transformer whose
translations depend on single heads."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from attnscope.cli import build_parser, main
from attnscope.executor import Runner
from attnscope.extras import join_ray
from attnscope.repository import LoadedModel, load_model_folder
from attnscope.testing import TINY_PAIRS, build_sharp_transformer
from attnscope.training.ablation import ablation_bleu
from attnscope.training.data import SPLITS
from attnscope.translator import Translator


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    """A tiny Transformer (2 + 2 layers, 2 heads) with weights large enough that single heads
    change its output (as tests/training/test_ablation.py builds it)."""
    return load_model_folder(build_sharp_transformer(tmp_path_factory.mktemp("ablation-ray")), torch.device("cpu"))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """test2016 = the tiny pairs."""
    folder = tmp_path_factory.mktemp("ablation-data")
    for side, lang in enumerate(("en", "de")):
        with gzip.open(folder / f"{SPLITS['test2016']}.{lang}.gz", "wt", encoding="utf-8") as f:
            f.writelines(pair[side] + "\n" for pair in TINY_PAIRS)
    return folder


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    pytest.importorskip("ray.data")
    import ray

    started = join_ray("", cpus=2, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def on_ray(model: LoadedModel, **options: int) -> Runner:
    """The local Ray's runner for ``model``, as ``evaluate --ablate --ray`` makes it."""
    return Runner(Path(model.path), max_source_tokens=10_000, ray="", **options)


def test_the_evaluate_flags() -> None:
    parse = build_parser().parse_args
    args = parse(["evaluate", "m", "--ablate", "--ray", "--actors", "2"])
    assert args.ray == "" and args.actors == 2 and args.threads == 1
    assert parse(["evaluate", "m", "--ablate"]).ray is None
    assert parse(["evaluate", "m", "--ablate", "--ray", "ray://head:10001"]).ray == "ray://head:10001"


@pytest.mark.usefixtures("local_ray")
def test_ray_gives_the_in_process_grids(model: LoadedModel, data_dir: Path) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # equal thread counts: the actor runs one (Runner.threads)
    try:
        local = ablation_bleu(Translator(model), data_dir, beam_size=1, progress=False)
    finally:
        torch.set_num_threads(threads)
    remote = ablation_bleu(Translator(model), data_dir, beam_size=1, runner=on_ray(model, actors=1, threads=1))
    assert remote == local
    grids = remote["bleu_without_head"]
    assert set(grids) == {"cross", "encoder_self", "decoder_self"}
    assert all([len(row) for row in grid] == [2, 2] for grid in grids.values())
    # Some head matters, so equal grids say the actor really switched heads off.
    assert any(v != remote["baseline"] for grid in grids.values() for row in grid for v in row)


@pytest.mark.usefixtures("local_ray")
def test_kinds_and_a_missing_kind(model: LoadedModel, data_dir: Path) -> None:
    remote = ablation_bleu(Translator(model), data_dir, kinds=["cross"], beam_size=1, runner=on_ray(model))
    assert list(remote["bleu_without_head"]) == ["cross"]
    with pytest.raises(ValueError, match="has no nope attention"):
        ablation_bleu(Translator(model), data_dir, kinds=["nope"], runner=on_ray(model))


def test_ray_without_ablate_is_refused(model: LoadedModel, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", str(model.path), "--data-dir", str(data_dir), "--alignment", "--ray"]) == 2
    assert "--ray goes with --ablate" in capsys.readouterr().err


@pytest.mark.usefixtures("local_ray")
def test_the_command_writes_the_in_process_grids_into_the_card(model: LoadedModel, data_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(model.path, folder)
    args = ["evaluate", str(folder), "--data-dir", str(data_dir), "--ablate", "--ablate-kinds", "cross", "--beam", "1"]
    assert main([*args, "--ray", "--update-card"]) == 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        local = ablation_bleu(Translator(model), data_dir, kinds=["cross"], beam_size=1, progress=False)
    finally:
        torch.set_num_threads(threads)
    assert json.loads((folder / "card.json").read_text())["ablation"] == local
