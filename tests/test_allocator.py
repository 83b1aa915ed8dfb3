"""attnscope.allocator: with glibc's malloc tuned, a buffer the size of a beam-search step's (logits of
32 sentences x 5 beams x 8,000 words: ~5 MB) comes from the heap and stays there when freed, so
the next step reuses it; with glibc's defaults it is a fresh mapping, handed back when freed.

What glibc did is read from its own books (``mallinfo2``), which makes this deterministic; the
page faults that follow from it depend on the machine (transparent huge pages, other load) and
are measured by bench/allocator.py instead. Each case runs in a fresh interpreter, so the
baseline is glibc's default."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnscope.config import REPO_ROOT

SIZE = 8 << 20

SCRIPT = """
import ctypes, ctypes.util, sys
from attnscope.allocator import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
if not hasattr(libc, "mallinfo2"):
    print("no-mallinfo2")
    sys.exit(0)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
applied = keep_freed_memory(int(sys.argv[1]))
before = libc.mallinfo2()
block = libc.malloc(int(sys.argv[2]))
held = libc.mallinfo2()
libc.free(block)
freed = libc.mallinfo2()
print(applied, *(getattr(m, f) for m in (before, held, freed) for f in ("arena", "hblkhd", "keepcost")))
"""


def _books(keep_mb: int) -> tuple[bool, list[int]]:
    """(whether the tuning applied, [arena, mmapped bytes, releasable top] before the malloc,
    while the block is held, after it is freed)."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(keep_mb), str(SIZE)], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    ).stdout.split()
    if out == ["no-mallinfo2"]:
        pytest.skip("not glibc >= 2.33 (no mallinfo2): the tuning is glibc's only")
    return out[0] == "True", [int(v) for v in out[1:]]


def test_tuned_malloc_keeps_a_freed_step_buffer_in_the_heap_for_the_next_step() -> None:
    applied, (arena0, mapped0, _, arena1, mapped1, _, arena2, mapped2, top2) = _books(256)
    assert applied
    # from the heap, not a fresh mapping (the heap may already have had some free room at its top,
    # so it grows by up to SIZE, and holds at least SIZE)
    assert mapped1 == mapped0 and arena1 >= arena0 and arena1 >= SIZE
    assert arena2 == arena1 and mapped2 == mapped0 and top2 >= SIZE  # freed: kept, reusable as is


def test_default_malloc_maps_a_step_buffer_afresh_and_gives_it_back() -> None:
    applied, (_, mapped0, _, _, mapped1, _, _, mapped2, _) = _books(0)
    assert not applied
    assert mapped1 - mapped0 >= SIZE  # its own mapping: the next step page-faults it in again
    assert mapped2 == mapped0  # unmapped on free
