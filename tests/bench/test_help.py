"""`nsqmp bench NAME --help` prints each benchmark's options and exits 0: argparse expands
%-formats in help texts only when asked for them, so a stray % breaks nothing but --help."""
import subprocess
import sys

import pytest

from nsqmp.bench.commands import BENCHMARKS


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_help_of_every_benchmark(name):
    done = subprocess.run([sys.executable, "-m", "nsqmp", "bench", name, "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
