"""Keep freed memory for reuse instead of handing it back to the OS between decoding steps.

Every decoding step allocates and frees the same few large tensors (logits and log-probabilities
of every row, the re-indexed key/value caches: megabytes each at batch 32 × beam 5). glibc's
malloc serves blocks over its mmap threshold (128 KB, rising to the largest freed one) with fresh
mappings and trims the heap's free top back to the OS, so the next step page-faults the same
memory in again, zeroed by the kernel: on one core, a batch-32 beam-5 decode of 32 test2016
sentences took ~19,000 page faults and spent 8 % of its time in the kernel. Raising the mmap
threshold to glibc's maximum (32 MB) and the trim threshold to ``keep_mb`` keeps that memory in
the process: no faults, and the same decode ~7 % faster (bench/peers.py measures attnscope this
way, and CTranslate2 in the same process).

The cost is that the process holds on to up to ``keep_mb`` of freed memory per malloc arena after
a peak instead of returning it; the peak itself does not change. Only glibc is tuned (musl, macOS
and others are left as they are); ``keep_mb`` 0 leaves glibc's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's largest accepted value on 64-bit systems


def keep_freed_memory(keep_mb: int = 256) -> bool:
    """Tune glibc's malloc as above (process-wide). Returns whether it was applied."""
    if keep_mb <= 0:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(
        mallopt(M_TRIM_THRESHOLD, keep_mb * 1024 * 1024)
    )
    if not applied:
        logger.info("malloc tuning not applied (mallopt refused)")
    return applied


def release_freed_memory() -> bool:
    """Hand the free memory of every malloc arena back to the OS (glibc's ``malloc_trim``):
    after a model is unloaded, its weights' blocks are free but kept (``keep_freed_memory`` keeps
    up to ``keep_mb`` per arena, and each loading thread may have had an arena of its own), so a
    bounded server would hold the peak of every model it ever loaded. A few milliseconds; only
    called when a model was unloaded. Returns whether glibc did it (False elsewhere)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):  # not glibc
        return False
