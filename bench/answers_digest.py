"""A digest of the JSON answers of every text model in ``--models`` to the first ``--sentences``
test2016 sentences, greedy and beam 5, every attention matrix and the beam tree included, served
by the real server of a checkout (``--checkout``, default this one) over HTTP. With ``--explain``
each request also asks for every explanation method, and the digest is of the answer's bytes as
sent (not re-serialised), so key order and float formatting are held too. Two checkouts whose
digests agree answer byte for byte alike: the check behind "outputs are identical" for a refactor.

    .venv/bin/python bench/answers_digest.py [--checkout DIR] [--sentences 50] [--explain] [--out digest.json]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.config import REPO_ROOT, get_settings  # noqa: E402
from attnscope.testing import server_process  # noqa: E402

VOLATILE = {"timing_ms"}
EXPLAIN_METHODS = ["norm", "rollout", "alti", "value_zeroing"]  # the methods of the first registry (#41)


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
    parser.add_argument("--texts", help="a text file (one sentence a line) instead of test2016 (when it is not downloaded)")
    parser.add_argument("--explain", action="store_true", help="ask for every explanation method; digest the raw bytes")
    parser.add_argument("--out", default="out/answers-digest.json")
    args = parser.parse_args()
    corpus = Path(args.texts) if args.texts else get_settings().data_dir / "test_2016_flickr.en.gz"
    with (gzip.open(corpus, "rt", encoding="utf-8") if corpus.suffix == ".gz" else corpus.open(encoding="utf-8")) as f:
        sentences = [line.strip() for line, _ in zip(f, range(args.sentences), strict=False)]
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
                        if args.explain:
                            body["explain"] = EXPLAIN_METHODS
                        answer = client.post(f"{url}/api/translate", json=body)
                        answer.raise_for_status()
                        if args.explain:  # timing_ms is the one volatile key: cut it from the bytes
                            digest.update(re.sub(rb'"timing_ms":[-0-9.eE+]+,?', b"", answer.content))
                        else:
                            digest.update(json.dumps(stable(answer.json()), sort_keys=True).encode())
                    digests[model][f"beam{beam}"] = digest.hexdigest()[:16]
                print(model, digests[model], flush=True)  # noqa: T201
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(digests, indent=1))


if __name__ == "__main__":
    main()
