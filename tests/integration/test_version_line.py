"""Every entry point's --version parses as nsqd's and nsqlookupd's do (gnsq's harness
pattern, issue 20) and still says nsqmp and its version."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from nsqmp.version import package_version

# gnsq's tests/integration_server.py, verbatim: it matches from the first character
GNSQ_VERSION_RE = re.compile(" ".join([
    r"(?P<name>[a-z]+)",
    r"v(?P<version>[0-9]+\.[0-9]+\.[0-9]+)(?:-[a-z]+)?",
    r"\(built w\/(?P<go_version>[a-z0-9.-]+)\)",
]))
BIN = os.path.dirname(sys.executable)


def _run(*argv: str) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    return out.stdout


@pytest.mark.parametrize("argv, name", [
    ([os.path.join(BIN, "nsqmp-nsqd"), "--version"], "nsqd"),
    ([os.path.join(BIN, "nsqmp-nsqd"), "-version"], "nsqd"),
    ([os.path.join(BIN, "nsqmp-nsqlookupd"), "--version"], "nsqlookupd"),
    ([os.path.join(BIN, "nsqmp-nsqlookupd"), "-version"], "nsqlookupd"),
    ([os.path.join(BIN, "nsqmp"), "--version"], "nsqd"),
    ([os.path.join(BIN, "nsqmp"), "serve", "--version"], "nsqd"),
    ([os.path.join(BIN, "nsqmp"), "lookupd", "--version"], "nsqlookupd"),
])
def test_version_line_parses_as_gnsq_reads_it(argv, name):
    text = _run(*argv)
    assert text.count("\n") == 1
    match = GNSQ_VERSION_RE.match(text)
    assert match, text
    # what gnsq's harness then does with it
    assert match.group("name") == name
    assert tuple(int(v) for v in match.group("version").split(".")) == (1, 3, 0)
    assert match.group("go_version") == f"nsqmp-{package_version()}-python{sys.version.split()[0]}"
    assert re.fullmatch(r"[a-z]+ v1\.3\.0 \(built w/nsqmp-[a-z0-9.-]+\)\n", text)
