"""The one version line every nsqmp command prints for ``--version``.

nsqd prints ``nsqd v1.3.0 (built w/go1.21.5)`` and client libraries' test harnesses parse
it (gnsq: ``(?P<name>[a-z]+) v(\\d+\\.\\d+\\.\\d+)(?:-[a-z]+)? \\(built
w\\/(?P<go_version>[a-z0-9.-]+)\\)``, then gate features on the version). nsqmp keeps that
shape and says what it is where nsqd names its Go toolchain:
``nsqd v1.3.0 (built w/nsqmp-0.1.0-python3.11.7)``. gnsq only stores go_version; the
NSQ version in front is the one nsqmp is compatible with, which is what harnesses gate on.
"""
from __future__ import annotations

import platform
import re

#: the NSQ release nsqmp's broker and lookupd answer as
NSQ_VERSION = "1.3.0"


def package_version() -> str:
    """nsqmp's own version (``dev`` when not installed as a package)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nsqmp")
    except PackageNotFoundError:
        return "dev"


def built_with() -> str:
    """``nsqmp-<version>-python<x.y.z>`` in the characters a Go version string has
    (lower case, digits, dots and dashes): anything else becomes a dash."""
    text = f"nsqmp-{package_version()}-python{platform.python_version()}".lower()
    return re.sub(r"[^a-z0-9.-]", "-", text)


def version_line(name: str, nsq_version: str = NSQ_VERSION) -> str:
    """``<name> v<nsq_version> (built w/nsqmp-...)``, as nsqd's and nsqlookupd's --version."""
    return f"{name} v{nsq_version} (built w/{built_with()})"
