"""snappy (framing format) and deflate (raw) stream upgrades after IDENTIFY, as nsqd does."""
from __future__ import annotations

import socket
import zlib

import orjson
import pytest
import snappy

from nsqmp.client import wire
from tests.harness import pynsq_round_trip, wait_for


class Compressed:
    """A raw V2 connection that upgrades like a client library does."""

    def __init__(self, address: str, codec: str, level: int = 6) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(wire.MAGIC + wire.identify({"feature_negotiation": True, codec: True,
                                                      "deflate_level": level}))
        self.plain = wire.FrameReader()
        self.reader = wire.FrameReader()
        self.frames: list = []
        first = self._plain_frame()
        self.identify = orjson.loads(first[1])
        if codec == "snappy":
            out, inp = snappy.StreamCompressor(), snappy.StreamDecompressor()
            self.encode, self.decode = out.add_chunk, inp.decompress
        else:
            c, d = zlib.compressobj(level, zlib.DEFLATED, -15), zlib.decompressobj(-15)
            self.encode = lambda b: c.compress(b) + c.flush(zlib.Z_SYNC_FLUSH)
            self.decode = d.decompress
        leftover = bytes(self.plain.buf)  # what followed the response is compressed
        if leftover:
            self.frames += self.reader.feed(self.decode(leftover))

    def _plain_frame(self):
        while True:
            got = self.plain.feed(self.sock.recv(4096), most=1)
            if got:
                return got[0]

    def send(self, data: bytes) -> None:
        self.sock.sendall(self.encode(data))

    def frame(self):
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError
            self.frames += self.reader.feed(self.decode(data))
        return self.frames.pop(0)


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_upgrade_then_publish_and_consume(broker, codec):
    c = Compressed(broker.tcp_address, codec, level=3)
    assert c.identify[codec] is True and c.identify["snappy" if codec == "deflate" else "deflate"] is False
    if codec == "deflate":
        assert c.identify["deflate_level"] == 3
    assert c.frame() == (wire.FRAME_RESPONSE, b"OK")  # the upgrade's OK, compressed
    c.send(wire.pub("z", b"compressed " * 50))
    assert c.frame() == (wire.FRAME_RESPONSE, b"OK")
    c.send(wire.sub("z", "ch") + wire.rdy(5))
    assert c.frame() == (wire.FRAME_RESPONSE, b"OK")
    ftype, payload = c.frame()
    assert ftype == wire.FRAME_MESSAGE and payload[26:] == b"compressed " * 50
    c.send(wire.fin(payload[10:26]))
    stats = broker.stats(topic="z")["topics"][0]["channels"][0]
    assert stats["clients"][0][codec] is True
    c.sock.close()


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_compressed_pub_runs_are_answered_and_kept(broker, codec):
    """After a topic's first PUB, the next ones go by the publish run, from each
    decompressed read: one per write, then many in one write."""
    from nsqmp.client import Connection

    c = Compressed(broker.tcp_address, codec, level=3)
    assert c.frame() == (wire.FRAME_RESPONSE, b"OK")
    bodies = [b"run %03d " % i * 4 for i in range(40)]
    for b in bodies[:10]:
        c.send(wire.pub("zrun", b))
        assert c.frame() == (wire.FRAME_RESPONSE, b"OK")
    c.send(b"".join(wire.pub("zrun", b) for b in bodies[10:]))
    for _ in bodies[10:]:
        assert c.frame() == (wire.FRAME_RESPONSE, b"OK")
    c.sock.close()
    got = []
    with Connection.connect(broker.tcp_address) as consumer:
        consumer.sub("zrun", "ch", rdy=100)
        while len(got) < len(bodies):
            m = consumer.read_message()
            got.append(m.body)
            consumer.fin(m.id)
    assert got == bodies


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_compressed_commands_in_the_same_write_as_identify(broker, codec):
    """The stream switches mid-buffer: what follows IDENTIFY in one read is already compressed."""
    if codec == "snappy":
        encode = snappy.StreamCompressor().add_chunk
        decode = snappy.StreamDecompressor().decompress
    else:
        c, d = zlib.compressobj(6, zlib.DEFLATED, -15), zlib.decompressobj(-15)
        encode, decode = (lambda b: c.compress(b) + c.flush(zlib.Z_SYNC_FLUSH)), d.decompress
    commands = wire.pub("midbuf", b"first") + wire.mpub("midbuf", [b"second", b"third"]) + wire.NOP
    with socket.create_connection(("127.0.0.1", broker.tcp_port), timeout=10) as s:
        s.sendall(wire.MAGIC + wire.identify({"feature_negotiation": True, codec: True}) + encode(commands))
        plain, reader, frames = wire.FrameReader(), wire.FrameReader(), []
        # only the IDENTIFY response is plain; the same read may already carry compressed bytes
        while not (got := plain.feed(s.recv(4096), most=1)):
            pass
        assert orjson.loads(got[0][1])[codec] is True
        rest = bytes(plain.buf)
        if rest:
            frames += reader.feed(decode(rest))
        while len(frames) < 3:
            data = s.recv(65536)
            assert data, f"closed after {frames}"
            frames += reader.feed(decode(data))
    assert frames == [(wire.FRAME_RESPONSE, b"OK")] * 3  # the upgrade's OK, then PUB's and MPUB's
    # the hand-off to the router is asynchronous
    wait_for(lambda: [t["message_count"] for t in broker.stats(topic="midbuf")["topics"]] == [3],
             what="the 3 messages at the router")


def test_both_codecs_at_once_is_refused(broker):
    s = socket.create_connection(("127.0.0.1", broker.tcp_port), timeout=10)
    s.sendall(wire.MAGIC + wire.identify({"feature_negotiation": True, "snappy": True, "deflate": True}))
    reader = wire.FrameReader()
    frames = []
    while not frames:
        frames = reader.feed(s.recv(4096))
    assert frames[0] == (wire.FRAME_ERROR, b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression")
    s.close()


def test_pynsq_with_snappy_writer_and_deflate_reader(broker):
    """Real client: pynsq negotiates snappy on one connection and deflate on the other."""
    bodies = [b"m%03d" % k for k in range(200)]
    got = pynsq_round_trip(broker.tcp_address, "zz", bodies, reader_opts={"deflate": True, "deflate_level": 5},
                           writer_opts={"snappy": True})
    assert sorted(got) == bodies
