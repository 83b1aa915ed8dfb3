"""Mutated PNGs (a fixed seed, a few hundred of them) are refused with a clear 422 message,
never an uncaught error: broken chunks (IHDR, cHRM, pHYs, sRGB, gAMA, palettes, APNG acTL...)
raise ValueError, struct.error and more deep inside Pillow."""

from __future__ import annotations

import base64
import io
import random
import re
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from attnscope.vision.images import ImageError, decode_png

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXTRA_CHUNKS = [b"cHRM", b"pHYs", b"sRGB", b"gAMA", b"acTL", b"fcTL", b"PLTE", b"tRNS", b"iCCP", b"zTXt",
                b"iTXt", b"tEXt", b"sBIT", b"bKGD", b"tIME", b"eXIf", b"hIST", b"sPLT", b"IHDR"]  # fmt: skip
MUTATIONS = 400


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    out, at = [], len(PNG_SIGNATURE)
    while at + 8 <= len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        out.append((png[at + 4 : at + 8], png[at + 8 : at + 8 + length]))
        at += 12 + length
    return out


def _seeds() -> list[bytes]:
    """Valid PNGs of several modes (gray, palette, RGBA, 16-bit) to mutate."""
    rng = np.random.default_rng(0)
    gray = (rng.random((16, 16)) * 255).astype(np.uint8)
    images = [Image.fromarray(gray), Image.fromarray(gray).convert("P"), Image.fromarray(gray).convert("RGBA"),
              Image.fromarray(gray.astype(np.uint16) * 200), Image.fromarray(gray).convert("LA")]  # fmt: skip
    out = []
    for img in images:
        buffer = io.BytesIO()
        img.save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def mutate(png: bytes, rng: random.Random) -> bytes:
    """One structural mutation with valid CRCs (so Pillow parses the broken chunk), or a raw one."""
    chunks = _chunks(png)
    how = rng.randrange(6)
    if how == 0:  # a chunk's data truncated, extended or flipped, CRC fixed
        i = rng.randrange(len(chunks))
        kind, data = chunks[i]
        data = bytearray(data[: rng.randrange(len(data) + 1)] if rng.random() < 0.5 else data)
        for _ in range(rng.randrange(1, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        chunks[i] = (kind, bytes(data) + bytes(rng.randrange(256) for _ in range(rng.randrange(3))))
    elif how in (1, 2):  # an ancillary (or odd) chunk of random size and content before IDAT
        kind = rng.choice(EXTRA_CHUNKS)
        data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, 3, 4, 7, 8, 9, 13, 26, 32, 40])))
        chunks.insert(rng.randrange(1, len(chunks)), (kind, data))
    elif how == 3:  # IHDR fields out of range (size, depth, colour type, interlace)
        kind, data = chunks[0]
        fields = bytearray(data)
        fields[rng.randrange(len(fields))] = rng.choice([0, 1, 3, 7, 9, 15, 16, 255])
        chunks[0] = (kind, bytes(fields))
    elif how == 4:  # chunks dropped or repeated
        i = rng.randrange(len(chunks))
        chunks = chunks[:i] + chunks[i + 1 :] if rng.random() < 0.5 else chunks[: i + 1] + chunks[i:]
    else:  # raw bytes: flipped or cut (mostly CRC or zlib errors)
        raw = bytearray(png)
        for _ in range(rng.randrange(1, 6)):
            raw[rng.randrange(len(PNG_SIGNATURE), len(raw))] = rng.randrange(256)
        return bytes(raw[: rng.randrange(len(PNG_SIGNATURE), len(raw) + 1)])
    return PNG_SIGNATURE + b"".join(_chunk(kind, data) for kind, data in chunks)


def test_mutated_pngs_are_refused_with_a_clear_message_or_read() -> None:
    rng = random.Random(35)
    seeds = _seeds()
    refused = 0
    for n in range(MUTATIONS):
        png = mutate(rng.choice(seeds), rng)
        try:
            pixels = decode_png(base64.b64encode(png).decode())
        except ImageError as err:
            refused += 1
            assert err.status in (413, 422)
            assert str(err) and not re.search(r"0x[0-9a-fA-F]{6,}", str(err)), (n, str(err))
            continue
        assert pixels.ndim == 2 and pixels.dtype == np.float32, n  # read: a usable image
    assert refused > MUTATIONS // 4  # the fuzzer does reach the error paths


@pytest.mark.parametrize(
    "kind,data",
    [(b"cHRM", b"\x00" * 7), (b"pHYs", b"\x00\x01"), (b"sRGB", b""), (b"gAMA", b"\x00"), (b"acTL", b"\x00\x00")],
)
def test_truncated_ancillary_chunks_are_a_422(kind: bytes, data: bytes) -> None:
    png = _seeds()[0]
    chunks = _chunks(png)
    chunks.insert(1, (kind, data))
    broken = PNG_SIGNATURE + b"".join(_chunk(k, d) for k, d in chunks)
    with pytest.raises(ImageError) as info:
        decode_png(base64.b64encode(broken).decode())
    assert info.value.status == 422 and "not a readable PNG" in str(info.value)
