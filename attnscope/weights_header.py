"""Checking a config against its weights file's own header, before anything is allocated.

A safetensors file starts with an 8-byte little-endian length and a JSON header naming every
tensor's dtype, shape and byte range. Reading that header costs a few kilobytes whatever the
file's size; the network a config describes can be built on PyTorch's ``meta`` device (shapes
only, no memory). Comparing the two refuses a config whose sizes the weights do not have
(``hidden_dim: 6000`` beside a 256-wide model's weights) before the real network is built, so a
hostile or mistyped config cannot make the process allocate gigabytes first.

The header is read once per version of the file: a bounded registry prices a load by its
weights' bytes (``tensor_bytes``) just before the load checks the config against the same
header, and both get one parse, remembered by the file's identity (device, inode, size and
modification time; a folder written again, in place or by a rename, is read again). The header
is a guard before allocation, not the last word: the load itself still refuses weights that do not
fit the network (``load_state_dict(strict=True)``).
"""

from __future__ import annotations

import json
import math
import struct
from functools import lru_cache
from pathlib import Path

import torch

from attnscope.nn.base import Seq2Seq

MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


class BadHeader(ValueError):
    """A weights file whose header is not a safetensors header (message says what is wrong)."""


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{tensor name: (dtype, shape)}`` from ``path``'s safetensors header, every tensor's byte
    range checked against its shape and the file's size; BadHeader otherwise. Read from disk
    once per version of the file (see the module's docstring)."""
    st = path.stat()
    return dict(_parsed(str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


def tensor_bytes(header: dict[str, tuple[str, tuple[int, ...]]]) -> int:
    """The bytes the header's tensors hold (what the weights take once loaded, as stored)."""
    return sum(math.prod(shape) * DTYPE_BYTES[dtype] for dtype, shape in header.values())


@lru_cache(maxsize=64)
def _parsed(
    file: str, device: int, inode: int, size: int, mtime_ns: int
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The header of ``file`` as it is now; the other arguments are its identity (the cache key)."""
    path = Path(file)
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise BadHeader(f"{size} bytes: too short for a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise BadHeader(f"its header claims {length} bytes, the file has {size}")
        try:
            header = json.loads(f.read(length))
        except ValueError as err:
            raise BadHeader(f"its header is not JSON: {err}") from err
    if not isinstance(header, dict):
        raise BadHeader("its header is not a JSON object")
    data_bytes = size - 8 - length
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            valid = all(isinstance(n, int) and n >= 0 for n in (*shape, begin, end))
        except (TypeError, KeyError, ValueError):
            valid = False
        if not valid or dtype not in DTYPE_BYTES or not 0 <= begin <= end <= data_bytes:
            raise BadHeader(f"tensor {name!r} has a malformed header entry")
        if end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise BadHeader(f"tensor {name!r}: {end - begin} bytes do not hold a {dtype} tensor of shape {list(shape)}")
        out[name] = (dtype, shape)
    return out


def expected_shapes(build: object, config: object) -> dict[str, tuple[int, ...]] | None:
    """The state dict's shapes of ``build(config)`` built on the meta device (no memory);
    None when the family cannot be built there (it computes on its tensors while building);
    BadHeader when the sizes overflow what a tensor can hold."""
    try:
        with torch.device("meta"):
            model: Seq2Seq = build(config)  # type: ignore[operator]
    except Exception as err:  # noqa: BLE001 - any family that computes on tensors while it is built
        if "overflow" in str(err):  # sizes past what any tensor can hold: never built for real either
            raise BadHeader(f"config.json's sizes cannot be built: {' '.join(str(err).split())[:200]}") from err
        return None
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def mismatches(expected: dict[str, tuple[int, ...]], found: dict[str, tuple[str, tuple[int, ...]]]) -> list[str]:
    """What differs between the config's shapes and the header's, worst first, at most 5 lines."""
    out = [f"{n}: config.json implies {list(s)}, the weights hold {list(found[n][1])}"
           for n, s in expected.items() if n in found and tuple(found[n][1]) != s]  # fmt: skip
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if missing:
        out.append(f"missing from the weights: {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}")
    if unexpected:
        out.append(f"not in config.json's network: {', '.join(unexpected[:5])}{' …' if len(unexpected) > 5 else ''}")
    return out[:5]
