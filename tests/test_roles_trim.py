"""roles.malloc_trim: what a burst freed goes back to the kernel (issue 24's memory row).

glibc raises its mmap threshold to the largest block freed and its trim threshold to
twice that, so after a burst of blocks of a few hundred kB (a router's reads and DELIVER
records) the freed memory stays resident; every role trims about once a second. Run in a
fresh interpreter: the test process's own heap is not ours to judge.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

_PROGRAM = textwrap.dedent("""
    import ctypes
    from nsqmp.roles import malloc_trim

    def rss_anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                return int(line.split()[1])

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(1 << 20))  # freed mmap'd block: the thresholds go up to 1 MiB
    # a burst: 80 blocks of 600 kB, now below the threshold, so on the heap, each followed
    # by a small block that stays in use (the heap cannot just shrink at its top); touched
    blocks, keep = [], []
    for _ in range(80):
        blocks.append(libc.malloc(600_000))
        keep.append(libc.malloc(100_000))  # larger than any free chunk: from the top
        ctypes.memset(blocks[-1], 1, 600_000)
    for b in blocks:
        libc.free(b)
    before = rss_anon()
    malloc_trim()
    after = rss_anon()
    malloc_trim()  # a second call finds nothing more to give and does no harm
    print(before, after)
""")


def test_malloc_trim_returns_a_freed_burst_to_the_kernel():
    out = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, check=True)
    before, after = (int(x) for x in out.stdout.split())
    # the 48 MB burst stayed resident after free() and is gone after the trim
    assert before - after > 40_000, (before, after)
