"""One-off: rewrite version-1 ``config.json`` files (one flat record with every architecture's
fields, so a Transformer said ``"score": "additive"``) as version 2 (only the architecture's own
fields). attnscope still reads version 1, so this is tidying, not a requirement; each rewritten
folder is loaded back (weights strict against the new config) before the next one.

    .venv/bin/python scripts/migrate_model_configs.py models/*
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.nn.config import config_to_dict  # noqa: E402
from attnscope.repository import CONFIG_FILE, FORMAT_VERSION, load_model_folder, read_config  # noqa: E402


def migrate(folder: Path) -> bool:
    """Rewrite ``folder/config.json`` as the current version; False if it already was."""
    config, meta = read_config(folder)
    if meta["format_version"] == FORMAT_VERSION:
        return False
    before = load_model_folder(folder).model.state_dict()
    meta = {**meta, "format_version": FORMAT_VERSION, "model": config_to_dict(config)}
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    after = load_model_folder(folder)
    assert after.config == config, folder
    assert all(after.model.state_dict()[k].equal(v) for k, v in before.items()), folder
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    for folder in parser.parse_args().folders:
        if (folder / CONFIG_FILE).is_file():
            print(f"{folder}: {'migrated' if migrate(folder) else 'already current'}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
