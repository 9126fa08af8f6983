"""roles.fix_malloc_thresholds: what a burst freed goes back to the kernel (issue 24's
memory row).

Left alone, glibc raises its mmap threshold to the largest mapped block freed and its trim
threshold to twice that, so after one large free a burst of blocks of a few hundred kB
comes from the heap and stays resident once freed. Every role fixes both thresholds at
start. Each case runs in a fresh interpreter: the test process's own heap is not ours.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

_PROGRAM = textwrap.dedent("""
    import ctypes, sys
    from nsqmp.roles import fix_malloc_thresholds

    def rss_anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                return int(line.split()[1])

    if sys.argv[1] == "fixed":
        fix_malloc_thresholds()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(16 << 20))  # one large block freed (a rewrite's read, say)
    base = rss_anon()
    blocks = [libc.malloc(300_000) for _ in range(80)]  # a burst of 24 MB, touched
    for b in blocks:
        ctypes.memset(b, 1, 300_000)
    for b in reversed(blocks):
        libc.free(b)
    print(rss_anon() - base)  # kB still resident after the burst was freed
""")


def _kept(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROGRAM, mode], capture_output=True, text=True,
                         check=True)
    return int(out.stdout)


def test_glibc_left_alone_keeps_a_freed_burst():
    # the case the setting is for: without it the 24 MB stay resident (the thresholds
    # went up to 16 and 32 MiB with the large free)
    assert _kept("default") > 20_000


def test_fixed_thresholds_give_a_freed_burst_back():
    assert _kept("fixed") < 10_000  # at most the trim threshold (4 MiB) stays
