"""Average the weights of model folders that share a shape and a tokenizer (a "model soup",
Wortsman et al. 2022): fine-tunes of one model, say, into one folder of the same format.

    .venv/bin/python scripts/average_models.py OUT FOLDER FOLDER [FOLDER ...]

Every parameter of OUT is the uniform mean of the inputs' (computed in fp32, saved in fp16 like
the shipped models). The inputs must have the same model config and the same tokenizer file;
OUT gets the first input's card with ``averaged_from`` naming the inputs (its measured numbers
are the first input's until ``attnscope evaluate --update-card`` replaces them). Soups of runs
from different starting points (two from-scratch runs) average unrelated weights and translate
badly; soups of fine-tunes from one model usually do not."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from attnscope.nn.config import config_to_dict  # noqa: E402
from attnscope.repository import (  # noqa: E402
    TOKENIZER_FILE,
    ModelFolderError,
    load_model_folder,
    save_model_folder,
)
from attnscope.training.train import average_states  # noqa: E402


def average_models(out: Path, folders: list[Path]) -> Path:
    """Write the uniform weight average of ``folders`` to ``out``; ValueError names a mismatch."""
    if len(folders) < 2:
        raise ValueError("give at least two model folders to average")
    if out.resolve() in {f.resolve() for f in folders}:
        raise ValueError(f"{out} is one of the inputs: write the average to a new folder")
    models = [load_model_folder(f) for f in folders]
    first, tokenizer_bytes = models[0], (folders[0] / TOKENIZER_FILE).read_bytes()
    for folder, other in zip(folders[1:], models[1:], strict=True):
        if config_to_dict(other.model.config) != config_to_dict(first.model.config):
            raise ValueError(f"{folder} has a different model config from {folders[0]}")
        if (folder / TOKENIZER_FILE).read_bytes() != tokenizer_bytes:
            raise ValueError(f"{folder} has a different tokenizer from {folders[0]}")
    first.model.load_state_dict(average_states([m.model.state_dict() for m in models]))  # training's checkpoint mean
    card = dict(first.card)
    card["averaged_from"] = [str(f) for f in folders]
    return save_model_folder(out, first.model, first.tokenizer, source_lang=first.source_lang,
                             target_lang=first.target_lang, card=card)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the model folder to write")
    parser.add_argument("folders", nargs="+", type=Path, help="model folders to average (at least two)")
    args = parser.parse_args(argv)
    try:
        written = average_models(args.out, args.folders)
    except (ValueError, ModelFolderError) as err:
        print(f"average_models: error: {err}", file=sys.stderr)  # noqa: T201 - the script's output
        return 2
    print(f"{written}: the average of {len(args.folders)} models")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
