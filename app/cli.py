"""The ``attnscope`` command: train, evaluate, download data, serve."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnscope", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the models over HTTP (API and pages)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--models-dir", default=None)
    serve.add_argument("--device", default=None, help="cpu, cuda, cuda:0 ... (default: cuda if available)")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        from app.serving.server import run

        run(host=args.host, port=args.port, models_dir=args.models_dir, device=args.device)
        return 0
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
