"""Topic and channel names: nsqd's regexp, where "$" is the end of the text."""
from __future__ import annotations

import pytest

from nsqmp.protocol.names import is_valid_name


@pytest.mark.parametrize("name, ok", [
    (b"a", True), (b"a.b_c-D9", True), (b"t#ephemeral", True), (b"x" * 64, True),
    (b"x" * 54 + b"#ephemeral", True), (b"x" * 55 + b"#ephemeral", False), (b"x" * 65, False),
    (b"", False), (b"#ephemeral", False), (b"a#eph", False), (b"a b", False),
    (b"a\n", False), (b"a#ephemeral\n", False), (b"\na", False), (b"a*", False),
])
def test_names(name, ok):
    assert is_valid_name(name) is ok
