"""``python -m attnscope.nn.native [--force]``: build and check the native library of this install
(what ``attnscope build-native`` and ``make install`` run). Exit status 1 when it cannot be
built; serving then takes the Python step."""

from __future__ import annotations

import argparse
import logging

from attnscope.nn.native import library


def main(argv: list[str] | None = None) -> int:
    """Build (unless a valid build is there, or with ``--force``) and check; 0 on success."""
    parser = argparse.ArgumentParser(prog="attnscope build-native", description=__doc__)
    parser.add_argument("--force", action="store_true", help="rebuild even if a valid build is there")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        path = library.build(force=args.force)
    except (library.BuildError, OSError) as err:  # OSError: e.g. a read-only install folder
        logging.getLogger("attnscope.nn.native").warning(
            "the native operations could not be built; attnscope will serve with the Python step: %s", err
        )
        return 1
    logging.getLogger("attnscope.nn.native").info("native operations ready: %s", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
