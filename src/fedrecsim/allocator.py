"""Keeping freed memory mapped for the life of a process that runs simulations.

A round of a protocol with large messages allocates, and then frees, the same large blocks again and
again: FedVAE's round of 250 users holds 250 encoded gradients in flight and 250 decoded ones at the
server, 9.2 GB at Mult-VAE's ml-1m size. glibc's allocator returns such memory to the kernel when it is
freed (blocks above its mmap threshold are unmapped; the heap's free top is trimmed), so the next round
faults every page in again: at that size most of a round's wall time is the kernel zeroing pages
(benchmarks/w4_fedvae.py measured 19.6 s against 3.9 s with the memory kept).

`keep_freed_memory` tells glibc to keep what the process frees: blocks up to its largest mmap threshold
(32 MiB on 64-bit) come from the heap, and the heap is never trimmed. The process's resident memory then
stays at its peak until it exits -- which it reaches anyway, in the round that needs it -- so the
setting is made where a process exists to run simulations: the ``fedrecsim`` command and the local
workers of a sweep. A program of one's own that calls `fedrecsim.run` decides for itself whether to
call ``fedrecsim.keep_freed_memory()`` (the call is process-wide and cannot be undone: glibc's adaptive
thresholds stay off).

Invariant: only the allocator's thresholds change; what a run computes, its transcript and its bytes are
the same either way. On a C library other than glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes

# mallopt's parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: The largest mmap threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX: 4 MiB x sizeof(long)).
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
#: A trim threshold of -1 is SIZE_MAX once glibc converts it: the heap's top is never given back.
_NEVER = -1


def keep_freed_memory() -> bool:
    """Make glibc keep the memory this process frees mapped (module docstring).

    Returns:
        Whether the C library took both settings: False where there is no ``mallopt`` (not glibc).
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) & bool(mallopt(_M_TRIM_THRESHOLD, _NEVER))


__all__ = ["MMAP_THRESHOLD_MAX", "keep_freed_memory"]
