"""glibc's allocator, tuned for one short command that allocates and frees large arrays (a release).

By default glibc gives each thread that allocates its own arena and returns a freed block of more than 128 KiB
to the system at once (``munmap``, or a trim of the heap's top), so the next array of that size is faulted in
page by page again. DPNE's counting frees and allocates arrays of millions of entries at every level, on one
thread per core: 118,000 minor page faults in a release on MSNBC, the kernel time a third of the wall clock and
most of its variation. ``keep_freed_memory`` puts every thread in the main arena, keeps what is freed for the
next allocation (up to 1 GiB at the heap's top, 64 MiB of headroom asked at a time) and serves blocks up to
32 MiB from the heap: 50,000 faults (``bench/RESULTS.md``). The memory is the system's again when the command
ends; long-running processes (the gate, Prefect's server and workers) keep glibc's defaults.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -2, -3, -8  # glibc's malloc.h
SETTINGS = ((M_ARENA_MAX, 1), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20), (M_MMAP_THRESHOLD, 32 << 20))


def keep_freed_memory() -> bool:
    """Apply ``SETTINGS`` to this process's glibc allocator, before its threads allocate (they keep the arena they
    have); False where the C library has no ``mallopt`` (not glibc) or refused one."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(option, value) == 1 for option, value in SETTINGS)
