"""The release command's allocator settings (``privrelease.core.memory``), observed through glibc's own reports in a
fresh process: a freed 20 MiB block is kept for the next allocation, and threads share the main arena; with glibc's
defaults (the weakened variant: the settings not applied) neither holds, so each check can fail."""

from __future__ import annotations

import subprocess
import sys

GLIBC = """
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc.mallinfo2.restype = Info


def kept_after_freeing(size):
    # the bytes glibc keeps free in its heaps after a block of this size is allocated, written and freed
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
    return libc.mallinfo2().fordblks
"""

PROBE = (
    GLIBC
    + """
import threading, sys
from privrelease.core import memory
applied = memory.keep_freed_memory() if sys.argv[1] == "tuned" else None
kept = kept_after_freeing(20 << 20)

def allocate():
    for _ in range(50):
        libc.free(libc.malloc(1 << 20))

threads = [threading.Thread(target=allocate) for _ in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc.fdopen.restype, libc.fdopen.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_char_p]
import os, tempfile
fd, path = tempfile.mkstemp()
stream = libc.fdopen(fd, b"w")
libc.malloc_info.argtypes, libc.fflush.argtypes, libc.fclose.argtypes = [ctypes.c_int, ctypes.c_void_p], [ctypes.c_void_p], [ctypes.c_void_p]
libc.malloc_info(0, stream)
libc.fclose(stream)
heaps = open(path).read().count("<heap nr=")
os.unlink(path)
print(applied, kept, heaps)
"""
)


def probe(mode: str) -> tuple[str, int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1]), int(out[2])


def test_the_release_commands_allocator_keeps_freed_blocks_in_one_arena():
    applied, kept, heaps = probe("tuned")
    assert applied == "True" and kept >= 20 << 20 and heaps == 1
    _, kept, heaps = probe("defaults")  # the weakened variant: glibc's defaults return the block and add arenas
    assert kept < 1 << 20 and heaps > 1


RELEASE = (
    GLIBC
    + """
from pathlib import Path
from privrelease.cli import main

def release_here(*args):
    print(kept_after_freeing(20 << 20))
    return {}

main._release_here = release_here  # what the release itself would do is not the point here
main._run_release(Path("request.yaml"), {})
"""
)


def test_the_release_command_applies_them_before_it_releases(tmp_path):
    """``privrelease release``'s path (``_run_release``) has them in place by the time the release runs."""
    env = {"PRIVRELEASE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, check=True, env=env, cwd=tmp_path)
    assert int(out.stdout.split()[-1]) >= 20 << 20
