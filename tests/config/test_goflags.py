"""Go's flag syntax (nsqmp/config/goflags.py), the tokenizer behind nsqlookupd's,
nsqadmin's and the utilities' command lines."""
from __future__ import annotations

import pytest

from nsqmp.config.goflags import HelpRequested, UsageError, bad_value, tokens

KINDS = {"gzip": True, "topic": False, "n": False}


def kind(name: str) -> bool | None:
    return KINDS.get(name)


def test_every_spelling_go_accepts():
    found, rest = tokens(["-topic", "a", "--topic=b", "-gzip", "--gzip=false", "-n=3", "x", "-n", "4"], kind)
    assert found == [("topic", "a"), ("topic", "b"), ("gzip", "true"), ("gzip", "false"), ("n", "3")]
    assert rest == ["x", "-n", "4"]  # the first non-flag ends the flags


def test_double_dash_ends_the_flags_and_is_taken():
    assert tokens(["-gzip", "--", "-topic", "a"], kind) == ([("gzip", "true")], ["-topic", "a"])
    assert tokens(["-"], kind) == ([], ["-"])  # a lone dash is an argument


@pytest.mark.parametrize("argv, text", [
    (["-bogus"], "flag provided but not defined: -bogus"),
    (["-topic"], "flag needs an argument: -topic"),
    (["---topic=a"], "bad flag syntax: ---topic=a"),
    (["-=a"], "bad flag syntax: -=a"),
])
def test_go_errors(argv, text):
    with pytest.raises(UsageError, match=f"^{text}$"):
        tokens(argv, kind)


def test_help_and_value_errors():
    for flag in ("-h", "--help"):
        with pytest.raises(HelpRequested):
            tokens([flag], kind)
    assert str(bad_value("gzip", "maybe", True, "parse error")) == 'invalid boolean value "maybe" for -gzip: parse error'
    assert str(bad_value("n", "x", False, "parse error")) == 'invalid value "x" for flag -n: parse error'
