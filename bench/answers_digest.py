"""A digest of the JSON answers of every text model in ``--models`` to the first ``--sentences``
test2016 sentences, greedy and beam 5, every attention matrix and the beam tree included, served
by the real server of a checkout (``--checkout``, default this one) over HTTP. Two checkouts whose
digests agree answer byte for byte alike: the check behind "outputs are identical" for a refactor.

    .venv/bin/python bench/answers_digest.py [--checkout DIR] [--sentences 50] [--out digest.json]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.config import REPO_ROOT, get_settings  # noqa: E402
from attnscope.testing import server_process  # noqa: E402

VOLATILE = {"timing_ms"}


def stable(value: object) -> object:
    """``value`` without the keys that change from run to run."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", default=str(REPO_ROOT))
    parser.add_argument("--models", default=str(REPO_ROOT / "models"))
    parser.add_argument("--sentences", type=int, default=50)
    parser.add_argument("--out", default="out/answers-digest.json")
    args = parser.parse_args()
    with gzip.open(get_settings().data_dir / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        sentences = [next(f).strip() for _ in range(args.sentences)]
    digests: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp, server_process(
        args.models, Path(tmp) / "server.log", checkout=Path(args.checkout)
    ) as (url, _):
        models = [m["id"] for m in httpx.get(f"{url}/api/models", timeout=30).json()["models"]]
        with httpx.Client(timeout=300) as client:
            for model in models:
                digests[model] = {}
                for beam in (1, 5):
                    digest = hashlib.sha256()
                    for text in sentences:
                        body = {"model": model, "text": text, "beam_size": beam, "return_beam": beam > 1}
                        answer = client.post(f"{url}/api/translate", json=body)
                        answer.raise_for_status()
                        digest.update(json.dumps(stable(answer.json()), sort_keys=True).encode())
                    digests[model][f"beam{beam}"] = digest.hexdigest()[:16]
                print(model, digests[model], flush=True)  # noqa: T201
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(digests, indent=1))


if __name__ == "__main__":
    main()
