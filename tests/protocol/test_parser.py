"""The NSQ V2 command parser: native (nsqmp._native.Parser, mpub_spans) and its
pure-Python twin (nsqmp.protocol.pyparser).

Differential tests give both the same input and require the same answer, exceptions
included: arbitrary bytes, and streams of valid and near-valid commands cut into chunks at
arbitrary points and fed as a connection would feed them. Model tests check that a valid
stream comes out as the commands that went in, whatever the chunking. The exact texts of
nsqd's errors are pinned by examples.
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nsqmp.protocol import parser as chooser
from nsqmp.protocol import pyparser as py
from nsqmp.protocol.pyparser import (
    BODY_INVALID, BODY_PENDING, NO_BODY, SCAN_BAD_BODY, SCAN_BODY_PENDING, SCAN_LINE_TOO_LONG,
    SCAN_MORE, SCAN_NEED_MORE,
)
from tests.harness import native_module

I32 = struct.Struct(">i")
BODY_TOKENS = [b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB"]
OTHER_TOKENS = [b"SUB", b"RDY", b"FIN", b"REQ", b"TOUCH", b"CLS", b"NOP"]
CONSTANTS = ["MAX_LINE", "NO_BODY", "BODY_PENDING", "BODY_INVALID", "SCAN_NEED_MORE", "SCAN_MORE",
             "SCAN_BODY_PENDING", "SCAN_BAD_BODY", "SCAN_LINE_TOO_LONG"]
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def native():
    return native_module("Parser")


def both(fn, *args, **kwargs):
    """Call fn on both implementations: the same result, or the same exception type and text."""
    results = []
    for impl in (native(), py):
        try:
            results.append(("ok", fn(impl, *args, **kwargs)))
        except (TypeError, ValueError, OverflowError) as exc:
            results.append((type(exc).__name__, str(exc)))
    assert results[0] == results[1], f"native {results[0]!r}\npython {results[1]!r}"
    return results[0]


def parser(impl, max_msg, max_body, max_line):
    cls = impl.Parser if impl is not py else py.PyParser
    return cls(max_msg, max_body, max_line)


def scan(impl, buf, limits, pos=0, max_commands=1024):
    return parser(impl, *limits).scan(buf, pos, max_commands)


# -- the API and the constants ----------------------------------------------------------------------

def test_the_constants_are_the_twins():
    n = native()
    assert {c: getattr(n, c) for c in CONSTANTS} == {c: getattr(py, c) for c in CONSTANTS}
    assert py.MAX_LINE == 16384  # nsqd's bufio.Reader


def test_the_chooser_picks_the_native_parser():
    n = native()
    assert chooser.Parser is n.Parser
    assert chooser.mpub_spans is n.mpub_spans and chooser.NativeParser is n.Parser


@pytest.mark.parametrize("impl", ["native", "python"])
def test_limits_are_readable(impl):
    p = parser(native() if impl == "native" else py, 10, 20, 30)
    assert (p.max_msg_size, p.max_body_size, p.max_line) == (10, 20, 30)
    default = (native().Parser if impl == "native" else py.PyParser)(1, 2)
    assert default.max_line == 16384


@pytest.mark.parametrize("args", [(-1, 5, 10), (5, -1, 10), (5, 5, 0), (5, 5, -3)])
def test_bad_limits_are_refused_alike(args):
    kind, text = both(lambda impl: parser(impl, *args))
    assert kind == "ValueError", text


@pytest.mark.parametrize("pos, max_commands", [(-1, 1), (6, 1), (0, 0), (2, -5)])
def test_bad_scan_arguments_are_refused_alike(pos, max_commands):
    kind, _ = both(scan, b"NOP\nX", (10, 10, 100), pos, max_commands)
    assert kind == "ValueError"


def test_scan_takes_keywords_and_any_buffer():
    for buf in (b"NOP\nFIN x\n", bytearray(b"NOP\nFIN x\n"), memoryview(b"__NOP\nFIN x\n")[2:]):
        kind, got = both(lambda impl: parser(impl, 10, 10, 100).scan(buf, pos=0, max_commands=5))
        assert got == ([((b"NOP",), NO_BODY, 0, 4), ((b"FIN", b"x"), NO_BODY, 0, 10)], 10, SCAN_NEED_MORE, None)


# -- exact results and nsqd's texts ------------------------------------------------------------------

LIMITS = (100, 200, 16384)  # max_msg, max_body, max_line


@pytest.mark.parametrize("data, expected", [
    (b"", ([], 0, SCAN_NEED_MORE, None)),
    (b"NOP", ([], 0, SCAN_NEED_MORE, None)),
    (b"\n", ([((b"",), NO_BODY, 0, 1)], 1, SCAN_NEED_MORE, None)),
    (b"RDY 1\r\n", ([((b"RDY", b"1"), NO_BODY, 0, 7)], 7, SCAN_NEED_MORE, None)),
    (b"RDY 1\r\r\n", ([((b"RDY", b"1\r"), NO_BODY, 0, 8)], 8, SCAN_NEED_MORE, None)),
    (b"SUB  t c \n", ([((b"SUB", b"", b"t", b"c", b""), NO_BODY, 0, 10)], 10, SCAN_NEED_MORE, None)),
    (b"PUB t\n", ([((b"PUB", b"t"), BODY_PENDING, -1, 0)], 0, SCAN_BODY_PENDING, None)),
    (b"PUB t\n\x00\x00\x00\x05abc", ([((b"PUB", b"t"), BODY_PENDING, 5, 0)], 0, SCAN_BODY_PENDING, None)),
    (b"PUB t\n\x00\x00\x00\x03abcNOP\n",
     ([((b"PUB", b"t"), 10, 3, 13), ((b"NOP",), NO_BODY, 0, 17)], 17, SCAN_NEED_MORE, None)),
    (b"pub t\n\x00\x00\x00\x03abc", ([((b"pub", b"t"), NO_BODY, 0, 6)], 6, SCAN_NEED_MORE, None)),
    (b"PUB\n\x00\x00\x00\x01x", ([((b"PUB",), 8, 1, 9)], 9, SCAN_NEED_MORE, None)),
    (b"PUB t\n" + I32.pack(0), ([((b"PUB", b"t"), BODY_INVALID, 0, 0)], 0, SCAN_BAD_BODY,
                                ("E_BAD_MESSAGE", "PUB invalid message body size 0"))),
    (b"PUB t\n" + I32.pack(-1), ([((b"PUB", b"t"), BODY_INVALID, -1, 0)], 0, SCAN_BAD_BODY,
                                 ("E_BAD_MESSAGE", "PUB invalid message body size -1"))),
    (b"PUB t\n" + I32.pack(101), ([((b"PUB", b"t"), BODY_INVALID, 101, 0)], 0, SCAN_BAD_BODY,
                                  ("E_BAD_MESSAGE", "PUB message too big 101 > 100"))),
    (b"DPUB t 5\n" + I32.pack(-2147483648),
     ([((b"DPUB", b"t", b"5"), BODY_INVALID, -2147483648, 0)], 0, SCAN_BAD_BODY,
      ("E_BAD_MESSAGE", "DPUB invalid message body size -2147483648"))),
    (b"DPUB t 5\n" + I32.pack(2147483647),
     ([((b"DPUB", b"t", b"5"), BODY_INVALID, 2147483647, 0)], 0, SCAN_BAD_BODY,
      ("E_BAD_MESSAGE", "DPUB message too big 2147483647 > 100"))),
    (b"MPUB t\n" + I32.pack(0), ([((b"MPUB", b"t"), BODY_INVALID, 0, 0)], 0, SCAN_BAD_BODY,
                                 ("E_BAD_BODY", "MPUB invalid body size 0"))),
    (b"MPUB t\n" + I32.pack(201), ([((b"MPUB", b"t"), BODY_INVALID, 201, 0)], 0, SCAN_BAD_BODY,
                                   ("E_BAD_BODY", "MPUB body too big 201 > 200"))),
    (b"IDENTIFY\n" + I32.pack(-7), ([((b"IDENTIFY",), BODY_INVALID, -7, 0)], 0, SCAN_BAD_BODY,
                                    ("E_BAD_BODY", "IDENTIFY invalid body size -7"))),
    (b"IDENTIFY\n" + I32.pack(201), ([((b"IDENTIFY",), BODY_INVALID, 201, 0)], 0, SCAN_BAD_BODY,
                                     ("E_BAD_BODY", "IDENTIFY body too big 201 > 200"))),
    (b"AUTH\n" + I32.pack(0), ([((b"AUTH",), BODY_INVALID, 0, 0)], 0, SCAN_BAD_BODY,
                               ("E_BAD_BODY", "AUTH invalid body size 0"))),
    (b"NOP\n" + b"x" * 16384, ([((b"NOP",), NO_BODY, 0, 4)], 4, SCAN_LINE_TOO_LONG, None)),
    (b"x" * 16383 + b"\n", ([((b"x" * 16383,), NO_BODY, 0, 16384)], 16384, SCAN_NEED_MORE, None)),
    (b"x" * 16383, ([], 0, SCAN_NEED_MORE, None)),
    (b"x" * 16384 + b"\n", ([], 0, SCAN_LINE_TOO_LONG, None)),
])
def test_examples(data, expected):
    assert both(scan, data, LIMITS) == ("ok", expected)


def test_max_commands_cuts_a_batch():
    data = b"NOP\n" * 5
    assert both(scan, data, LIMITS, 0, 2) == ("ok", (
        [((b"NOP",), NO_BODY, 0, 4), ((b"NOP",), NO_BODY, 0, 8)], 8, SCAN_MORE, None))
    assert both(scan, data, LIMITS, 16, 2) == ("ok", ([((b"NOP",), NO_BODY, 0, 20)], 20, SCAN_NEED_MORE, None))


def test_known_tokens_are_shared_objects():
    p = native().Parser(10, 10)
    (a, *_), _, _, _ = p.scan(b"FIN 1\n")
    (b, *_), _, _, _ = p.scan(bytearray(b"FIN 2\n"))
    assert a[0][0] is b[0][0]


def mpub_body(*bodies: bytes, count: int | None = None) -> bytes:
    n = len(bodies) if count is None else count
    return I32.pack(n) + b"".join(I32.pack(len(b)) + b for b in bodies)


@pytest.mark.parametrize("body, expected", [
    (b"", ("E_BAD_BODY", "MPUB failed to read message count")),
    (b"\x00\x00\x01", ("E_BAD_BODY", "MPUB failed to read message count")),
    (mpub_body(count=0), ("E_BAD_BODY", "MPUB invalid message count 0")),
    (mpub_body(count=-1), ("E_BAD_BODY", "MPUB invalid message count -1")),
    (mpub_body(count=40), ("E_BAD_BODY", "MPUB invalid message count 40")),  # (200 - 4) // 5 = 39
    (mpub_body(count=39), ("E_BAD_MESSAGE", "MPUB failed to read message(0) body size")),
    (mpub_body(b"ok", count=2), ("E_BAD_MESSAGE", "MPUB failed to read message(1) body size")),
    (mpub_body(b"ok", b""), ("E_BAD_MESSAGE", "MPUB invalid message(1) body size 0")),
    (I32.pack(1) + I32.pack(-5), ("E_BAD_MESSAGE", "MPUB invalid message(0) body size -5")),
    (mpub_body(b"y" * 101), ("E_BAD_MESSAGE", "MPUB message too big 101 > 100")),
    (mpub_body(b"abc")[:-1], ("E_BAD_MESSAGE", "MPUB failed to read message body")),
])
def test_mpub_errors(body, expected):
    assert both(lambda impl: impl.mpub_spans(body, 0, len(body), 100, 200)) == ("ok", (None, expected))


def bodies(impl, buf, start, length, max_msg, max_body):
    """The messages mpub_spans names, as bytes (or its error)."""
    spans, error = impl.mpub_spans(buf, start, length, max_msg, max_body)
    if spans is None:
        return None, error
    return [bytes(buf[o:o + n]) for o, n in struct.iter_unpack("<II", spans)], None


def test_mpub_spans():
    body = b"head" + mpub_body(b"a", b"bc", b"y" * 100) + b"trailing bytes are ignored"
    length = len(body) - 4
    assert both(lambda impl: bodies(impl, body, 4, length, 100, 200)) == ("ok", ([b"a", b"bc", b"y" * 100], None))
    spans = struct.pack("<6I", 12, 1, 17, 2, 23, 100)
    assert both(lambda impl: impl.mpub_spans(bytearray(body), 4, length, 100, 200)) == ("ok", (spans, None))


@pytest.mark.parametrize("start, length", [(-1, 4), (0, -1), (3, 20), (30, 0)])
def test_mpub_bad_arguments_alike(start, length):
    body = mpub_body(b"abc")
    kind, _ = both(lambda impl: impl.mpub_spans(body, start, length, 100, 200))
    assert kind == "ValueError"


@pytest.mark.parametrize("max_body", [0, 3, 4, 8, 9, 10])
def test_mpub_count_limit_is_gos_division(max_body):
    # (max_body - 4) / 5 truncates toward zero in Go: 0 for max_body 0..8, never -1
    body = mpub_body(b"z")
    kind, got = both(lambda impl: bodies(impl, body, 0, len(body), 100, max_body))
    expected = ([b"z"], None) if max_body >= 9 else (None, ("E_BAD_BODY", "MPUB invalid message count 1"))
    assert got == expected


# -- differential fuzzing: arbitrary input ------------------------------------------------------------

FRAGMENTS = st.sampled_from([
    b"PUB", b"MPUB", b"DPUB", b"IDENTIFY", b"AUTH", b"FIN", b"RDY", b"NOP", b" ", b"\n", b"\r", b"\r\n",
    b"t", b"\x00\x00\x00\x03", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff",
    b"\x00\x00\x00\x40", b"abc", b"\x00", b"\xff",
])
WIRE = st.one_of(st.binary(max_size=200), st.lists(FRAGMENTS, max_size=40).map(b"".join))
LIMIT_SETS = st.tuples(st.integers(0, 70), st.integers(0, 90), st.one_of(st.integers(1, 40), st.just(16384)))


@FUZZ
@given(data=WIRE, limits=LIMIT_SETS, pos_frac=st.floats(0, 1), max_commands=st.integers(1, 6),
       kind=st.sampled_from(["bytes", "bytearray", "memoryview"]))
@example(data=b"PUB t\n\x00\x00\x00\x03abcNOP\n", limits=(10, 10, 16384), pos_frac=0.0, max_commands=1,
         kind="bytes")
def test_scan_agrees_on_arbitrary_bytes(data, limits, pos_frac, max_commands, kind):
    pos = int(len(data) * pos_frac)
    buf = {"bytes": bytes, "bytearray": bytearray, "memoryview": memoryview}[kind](data)
    kind_, result = both(scan, buf, limits, pos, max_commands)
    assert kind_ == "ok", result
    commands, end, status, error = result
    # the invariants every caller relies on
    assert pos <= end <= len(data)
    assert (error is not None) == (status == SCAN_BAD_BODY)
    last = pos
    for i, (params, off, size, nxt) in enumerate(commands):
        assert params and all(isinstance(p, bytes) for p in params)
        if off in (BODY_PENDING, BODY_INVALID):
            assert i == len(commands) - 1 and nxt == last == end
            assert status == (SCAN_BODY_PENDING if off == BODY_PENDING else SCAN_BAD_BODY)
        elif off == NO_BODY:
            assert params[0] not in BODY_TOKENS and nxt > last and size == 0
        else:
            assert params[0] in BODY_TOKENS and nxt == off + size and off > last
        last = nxt
    if status == SCAN_MORE:
        assert len(commands) == max_commands


@FUZZ
@given(data=st.binary(max_size=120), start_frac=st.floats(0, 1), len_frac=st.floats(0, 1),
       max_msg=st.integers(0, 40), max_body=st.integers(0, 120))
def test_mpub_agrees_on_arbitrary_bytes(data, start_frac, len_frac, max_msg, max_body):
    start = int(len(data) * start_frac)
    length = int((len(data) - start) * len_frac)
    kind, spans = both(lambda impl: impl.mpub_spans(bytearray(data), start, length, max_msg, max_body))
    assert kind == "ok"
    if spans[0] is not None:
        pairs = list(struct.iter_unpack("<II", spans[0]))
        assert all(start + 4 <= o and o + n <= start + length for o, n in pairs)
        assert all(0 < n <= max_msg for _, n in pairs)


# -- streams of commands, cut into chunks, as a connection feeds them -----------------------------------

SAFE = st.binary(max_size=6).filter(lambda b: not (set(b) & {0x20, 0x0A, 0x0D}))


@st.composite
def command(draw, max_msg: int, max_body: int, valid: bool):
    """(wire bytes, expected params, expected body or None) of one command."""
    token = draw(st.one_of(st.sampled_from(BODY_TOKENS + OTHER_TOKENS), SAFE))
    params = draw(st.lists(SAFE, max_size=3))
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    line = b" ".join([token, *params]) + eol
    if token not in BODY_TOKENS:
        return line, (token, *params), None
    limit = max_msg if token in (b"PUB", b"DPUB") else max_body
    body = draw(st.binary(min_size=1, max_size=max(1, min(limit, 60))))
    size = len(body)
    if not valid:
        size = draw(st.one_of(st.just(size), st.integers(-(2 ** 31), 2 ** 31 - 1),
                              st.sampled_from([0, -1, limit, limit + 1])))
    return line + I32.pack(size) + body, (token, *params), body


@st.composite
def stream(draw, valid: bool):
    max_msg = draw(st.integers(1, 60))
    max_body = draw(st.integers(1, 80))
    cmds = draw(st.lists(command(max_msg, max_body, valid), max_size=12))
    if valid:
        # every body within its limit
        cmds = [c for c in cmds if c[2] is None or len(c[2]) <= (
            max_msg if c[1][0] in (b"PUB", b"DPUB") else max_body)]
    wire = b"".join(c[0] for c in cmds)
    if not valid:
        wire += draw(st.binary(max_size=20))
    cuts = sorted(draw(st.lists(st.integers(0, len(wire)), max_size=8)))
    chunks = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)])]
    return (max_msg, max_body), cmds, chunks


def feed(impl, limits: tuple[int, int, int], chunks: list[bytes], max_commands: int):
    """Feed chunks into a read buffer as the acceptor does: returns what was taken, every scan's
    result, how it ended and what was left in the buffer."""
    p = parser(impl, *limits)
    buf = bytearray()
    taken: list[tuple[tuple[bytes, ...], bytes | None]] = []
    scans = []
    for chunk in chunks:
        buf += chunk
        pos = 0
        while True:
            result = p.scan(buf, pos, max_commands)
            scans.append(result)
            commands, end, status, error = result
            for params, off, size, _ in commands:
                if off >= 0:
                    taken.append((params, bytes(buf[off:off + size])))
                elif off == NO_BODY:
                    taken.append((params, None))
            pos = end
            if status == SCAN_MORE:
                continue
            if status in (SCAN_BAD_BODY, SCAN_LINE_TOO_LONG):
                return taken, scans, (status, error), bytes(buf[pos:])
            break
        del buf[:pos]
    return taken, scans, (SCAN_NEED_MORE, None), bytes(buf)


@FUZZ
@given(s=stream(valid=True), max_commands=st.integers(1, 4), max_line=st.sampled_from([64, 16384]))
def test_a_valid_stream_comes_out_as_it_went_in(s, max_commands, max_line):
    (max_msg, max_body), cmds, chunks = s
    limits = (max_msg, max_body, max_line)
    kind, (taken, scans, ending, rest) = both(feed, limits, chunks, max_commands)
    assert kind == "ok"
    assert taken == [(c[1], c[2]) for c in cmds]
    assert ending == (SCAN_NEED_MORE, None) and rest == b""


@FUZZ
@given(s=stream(valid=False), max_commands=st.integers(1, 4), max_line=st.sampled_from([8, 30, 16384]))
def test_near_valid_streams_agree_chunk_by_chunk(s, max_commands, max_line):
    (max_msg, max_body), _, chunks = s
    kind, (taken, scans, ending, rest) = both(feed, (max_msg, max_body, max_line), chunks, max_commands)
    assert kind == "ok"
    # whatever the chunking, the same commands are taken and the stream ends the same way
    # (the buffer keeps the unfinished command at its start, so a line too long or a bad body
    # size is found whatever the cuts)
    whole = b"".join(chunks)
    _, (taken_whole, _, ending_whole, _) = both(feed, (max_msg, max_body, max_line), [whole], max_commands)
    assert (taken, ending) == (taken_whole, ending_whole)


# -- MPUB bodies: valid ones come out as they went in, near-valid ones get the same error -------------

@st.composite
def mpub_case(draw, valid: bool):
    max_msg = draw(st.integers(1, 40))
    max_body = draw(st.integers(9, 400))
    limit = min(max_msg, 30)
    max_count = min((max_body - 4) // 5, 12)
    messages = draw(st.lists(st.binary(min_size=1, max_size=limit), min_size=1, max_size=max_count))
    sizes = [len(m) for m in messages]
    count = len(messages)
    if not valid:
        count = draw(st.one_of(st.just(count), st.integers(-3, count + 3), st.just(2 ** 31 - 1)))
        sizes = [draw(st.one_of(st.just(n), st.integers(-2, max_msg + 2))) for n in sizes]
    body = I32.pack(count) + b"".join(I32.pack(n) + m for n, m in zip(sizes, messages))
    if not valid:
        body = body[:draw(st.integers(0, len(body)))]
    prefix = draw(st.binary(max_size=8))
    trailing = draw(st.binary(max_size=8))
    return prefix + body + trailing, len(prefix), len(body), max_msg, max_body, messages


@FUZZ
@given(case=mpub_case(valid=True))
def test_a_valid_mpub_body_comes_out_as_it_went_in(case):
    buf, start, length, max_msg, max_body, messages = case
    assert both(lambda impl: bodies(impl, buf, start, length, max_msg, max_body)) == ("ok", (messages, None))
    kind, (spans, error) = both(lambda impl: impl.mpub_spans(buf, start, length, max_msg, max_body))
    assert error is None
    assert [buf[o:o + n] for o, n in struct.iter_unpack("<II", spans)] == messages


@FUZZ
@given(case=mpub_case(valid=False))
def test_near_valid_mpub_bodies_agree(case):
    buf, start, length, max_msg, max_body, messages = case
    kind, (got, error) = both(lambda impl: bodies(impl, buf, start, length, max_msg, max_body))
    assert kind == "ok" and (got is None) != (error is None)
    assert both(lambda impl: impl.mpub_spans(buf, start, length, max_msg, max_body))[1][1] == error
    if error is not None:
        assert error[0] in ("E_BAD_BODY", "E_BAD_MESSAGE") and error[1].startswith("MPUB ")


# -- runs of plain FIN lines (Parser.fins) ------------------------------------------------------------

def fins(impl, buf, limits, pos=0, max_ids=512):
    return parser(impl, *limits).fins(buf, pos, max_ids)


ID = b"0123456789abcdef"


@pytest.mark.parametrize("data, expected", [
    (b"FIN " + ID + b"\n", (ID, 21)),
    (b"FIN " + ID + b"\r\n", (ID, 22)),
    (b"FIN " + ID + b"\nFIN " + ID[::-1] + b"\r\nRDY 1\n", (ID + ID[::-1], 43)),
    (b"FIN " + ID, (b"", 0)),                         # the line is not complete yet
    (b"FIN " + ID + b"\r", (b"", 0)),
    (b"FIN " + ID[:15] + b"\r\n", (b"", 0)),          # 15-byte ID: scan's "Invalid Message ID"
    (b"FIN " + ID[:15] + b"\r\n" + b"FIN " + ID + b"\n", (b"", 0)),
    (b"FIN " + ID + b"x\n", (b"", 0)),                # 17 bytes
    (b"FIN " + ID[:8] + b" " + ID[9:] + b"\n", (b"", 0)),  # a space: two params
    (b"FIN  " + ID + b"\n", (b"", 0)),
    (b"FIN " + ID + b" \n", (b"", 0)),                # an empty third param
    (b"fin " + ID + b"\n", (b"", 0)),
    (b"RDY 1\nFIN " + ID + b"\n", (b"", 0)),
    (b"FIN " + ID[:8] + b"\r" + ID[9:] + b"\n", (ID[:8] + b"\r" + ID[9:], 21)),  # \r inside is ID
    (b"FIN " + ID[:15] + b"\r\r\n", (ID[:15] + b"\r", 22)),  # one trailing \r dropped
])
def test_fin_run_examples(data, expected):
    assert both(fins, data, (100, 100, 16384)) == ("ok", expected)


def test_fin_run_stops_at_max_ids_and_max_line():
    data = (b"FIN " + ID + b"\n") * 5
    assert both(fins, data, (100, 100, 16384), 0, 3) == ("ok", (ID * 3, 63))
    assert both(fins, data, (100, 100, 16384), 42, 512) == ("ok", (ID * 3, 105))
    assert both(fins, data, (100, 100, 21)) == ("ok", (ID * 5, 105))
    assert both(fins, data, (100, 100, 20)) == ("ok", (b"", 0))   # scan: line too long
    crlf = b"FIN " + ID + b"\r\n"
    assert both(fins, crlf, (100, 100, 21)) == ("ok", (b"", 0))


@pytest.mark.parametrize("pos, max_ids", [(-1, 1), (22, 1), (0, 0), (0, -2)])
def test_bad_fin_run_arguments_are_refused_alike(pos, max_ids):
    kind, _ = both(fins, b"FIN " + ID + b"\n", (100, 100, 16384), pos, max_ids)
    assert kind == "ValueError"


FIN_FRAGMENTS = st.sampled_from([
    b"FIN ", b"FIN " + ID, b"FIN " + ID + b"\n", b"FIN " + ID + b"\r\n", ID, ID[:15], b" ", b"\n",
    b"\r", b"\r\n", b"RDY 1\n", b"x", b"\x00",
])


@FUZZ
@given(data=st.one_of(st.binary(max_size=120), st.lists(FIN_FRAGMENTS, max_size=30).map(b"".join)),
       pos_frac=st.floats(0, 1), max_ids=st.integers(1, 8), max_line=st.sampled_from([8, 21, 22, 16384]),
       kind=st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_a_fin_run_is_what_scan_returns_for_those_lines(data, pos_frac, max_ids, max_line, kind):
    """Both implementations agree, and the run is exactly the leading commands that scan()
    gives as (b"FIN", 16-byte ID): the acceptor may take either path for them."""
    pos = int(len(data) * pos_frac)
    buf = {"bytes": bytes, "bytearray": bytearray, "memoryview": memoryview}[kind](data)
    limits = (100, 100, max_line)
    kind_, (ids, end) = both(fins, buf, limits, pos, max_ids)
    assert kind_ == "ok" and len(ids) % 16 == 0 and len(ids) // 16 <= max_ids
    commands, _, _, _ = scan(py, data, limits, pos)
    plain = []
    for params, off, size, nxt in commands:
        if len(plain) == max_ids or len(params) != 2 or params[0] != b"FIN" or len(params[1]) != 16:
            break
        plain.append((params[1], nxt))
    assert ids == b"".join(i for i, _ in plain)
    assert end == (plain[-1][1] if plain else pos)
