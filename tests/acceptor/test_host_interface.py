"""The connection and its acceptor meet at nsqmp.acceptor.host.AcceptorSide only: the
connection's modules ask the acceptor for nothing it does not declare, and the running
Acceptor provides all of it."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

from nsqmp.acceptor import host
from nsqmp.acceptor.role import Acceptor
from tests.acceptor.seams import RecordingAcceptor

ACCEPTOR = Path(host.__file__).parent
CONNECTION_MODULES = ["tcp", "session", "publishing", "consuming", "authorize", "upgrade",
                      "heartbeat", "flow", "clientstats"]


def declared() -> set[str]:
    side = host.AcceptorSide
    names = set(side.__annotations__)
    names |= {n for n, v in vars(side).items() if inspect.isfunction(v) and not n.startswith("__")}
    return names


def asked_of_the_acceptor(module: str) -> set[str]:
    """Every X in `host.X`, `self.host.X` or `conn.host.X` in a module."""
    tree = ast.parse((ACCEPTOR / f"{module}.py").read_text())
    asked = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id == "host" \
                or isinstance(value, ast.Attribute) and value.attr == "host":
            asked.add(node.attr)
    return asked


def test_the_connection_asks_only_what_the_interface_declares():
    names = declared()
    for module in CONNECTION_MODULES:
        extra = asked_of_the_acceptor(module) - names
        assert not extra, f"nsqmp/acceptor/{module}.py asks its acceptor for {sorted(extra)}"
    assert "self.server" not in (ACCEPTOR / "tcp.py").read_text()


def test_the_acceptor_and_the_test_recorder_provide_all_of_it():
    source = "".join(inspect.getsource(cls) for cls in Acceptor.__mro__[:-1])  # the Role base too
    for name in sorted(declared()):
        # a method or property of the class, or an attribute its setup/__init__ assigns
        assert hasattr(Acceptor, name) or f"self.{name} =" in source, name
        assert hasattr(RecordingAcceptor(), name), name
