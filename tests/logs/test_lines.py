"""nsqd's log lines (issue 21), read from a running broker's log: a client's connection,
magic, IDENTIFY, errors sent and exit in its acceptor; a topic's and channel's life in
its router, once per broker; and nsqd's line format for `nsqmp nsqd`."""
from __future__ import annotations

import re
import socket
import subprocess
import sys

from nsqmp.client import Connection, wire
from tests.harness import wait_for


def test_client_and_topic_lines(broker):
    with Connection.connect(broker.tcp_address) as c:
        remote = "127.0.0.1:%d" % c.sock.getsockname()[1]
        c.identify(client_id="app-7", hostname="h7", user_agent="logtest/1.0")
        c.sub("logs_t", "logs_c")
        c.send(b"BOGUS\n")
        assert c.read_frame().data == b"E_INVALID invalid command BOGUS"
    for path in ("/topic/pause?topic=logs_t", "/channel/pause?topic=logs_t&channel=logs_c",
                 "/channel/unpause?topic=logs_t&channel=logs_c", "/topic/unpause?topic=logs_t",
                 "/channel/empty?topic=logs_t&channel=logs_c", "/topic/empty?topic=logs_t",
                 "/channel/delete?topic=logs_t&channel=logs_c", "/topic/delete?topic=logs_t"):
        assert broker.http("POST", path)[0] == 200, path
    want = [
        f"TCP: new client({remote})",
        f"CLIENT({remote}): desired protocol magic '  V2'",
        f"[{remote}] IDENTIFY: {{ClientID:app-7 Hostname:h7 HeartbeatInterval:0 OutputBufferSize:0 "
        f"OutputBufferTimeout:0 FeatureNegotiation:true TLSv1:false Deflate:false DeflateLevel:0 "
        f"Snappy:false SampleRate:0 UserAgent:logtest/1.0 MsgTimeout:0}}",
        f"[{remote}] - E_INVALID invalid command BOGUS",
        f"PROTOCOL(V2): [{remote}] exiting ioloop",
        "TOPIC(logs_t): created",
        "TOPIC(logs_t): new channel(logs_c)",
        "TOPIC(logs_t): pausing", "TOPIC(logs_t): unpausing",
        "TOPIC(logs_t): pausing channel logs_c", "TOPIC(logs_t): unpausing channel logs_c",
        "TOPIC(logs_t): emptying channel logs_c", "TOPIC(logs_t): emptying",
        "TOPIC(logs_t): deleting channel logs_c", "CHANNEL(logs_c): deleting",
        "TOPIC(logs_t): deleting",
    ]
    wait_for(lambda: all(w in broker.log_text() for w in want),
             what=lambda: f"missing {[w for w in want if w not in broker.log_text()]}")
    text = broker.log_text()
    # a topic's lines come from its router alone (not once per acceptor)
    assert text.count("TOPIC(logs_t): created") == 1
    assert text.count("TOPIC(logs_t): new channel(logs_c)") == 1
    line = next(ln for ln in text.splitlines() if f"TCP: new client({remote})" in ln)
    assert re.search(r" INFO nsqmp\.acceptor\[\d+\]: ", line), line
    line = next(ln for ln in text.splitlines() if "TOPIC(logs_t): created" in ln)
    assert re.search(r" INFO nsqmp\.router\[\d+\]: ", line), line
    line = next(ln for ln in text.splitlines() if "invalid command BOGUS" in ln)
    assert " ERROR nsqmp.acceptor[" in line


def test_a_bad_magic_is_logged(broker):
    host, _, port = broker.tcp_address.rpartition(":")
    with socket.create_connection((host, int(port))) as s:
        remote = "127.0.0.1:%d" % s.getsockname()[1]
        s.sendall(b"  V9")
        s.recv(100)
    wait_for(lambda: f"client({remote}) bad protocol magic '  V9'" in broker.log_text(), what="bad magic line")
    assert f"PROTOCOL(V2): [{remote}] exiting ioloop" not in broker.log_text()


def test_nsqd_command_line_writes_nsqds_format(tmp_path):
    """`nsqmp nsqd`: "[nsqd] YYYY/MM/DD HH:MM:SS.micros LEVEL: text", as lg writes it."""
    log = tmp_path / "nsqd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "nsqmp", "nsqd", "--tcp-address=127.0.0.1:0",
                                 "--http-address=127.0.0.1:0", f"--data-path={tmp_path}"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "nsqmp ready" in log.read_text(), timeout=20, what="nsqd ready")
        port = int(re.search(r"TCP: listening on [\d.]+:(\d+)", log.read_text()).group(1))
        with Connection.connect(f"127.0.0.1:{port}") as c:
            c.send(wire.pub("nsqd_t", b"x"))
            c.expect_ok()
        wait_for(lambda: "TOPIC(nsqd_t): created" in log.read_text(), what="topic line")
        lines = log.read_text().splitlines()
        for text in ("TCP: new client(127.0.0.1:", "TOPIC(nsqd_t): created"):
            line = next(ln for ln in lines if text in ln)
            assert re.match(r"\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} INFO: ", line), line
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_upgrades_and_clamps_are_logged(broker):
    """IDENTIFY's negotiated upgrade, and nsqd's REQ clamp and RDY-after-CLS lines."""
    with Connection.connect(broker.tcp_address) as c:
        remote = "127.0.0.1:%d" % c.sock.getsockname()[1]
        c.identify(deflate=True, deflate_level=3)
    with Connection.connect(broker.tcp_address) as c:
        other = "127.0.0.1:%d" % c.sock.getsockname()[1]
        c.identify()
        c.sub("clamp_t", "c", rdy=1)
        c.pub("clamp_t", b"m")
        msg = c.read_message()
        c.send(wire.req(msg.id, 10 ** 9))  # far past --max-req-timeout (1h)
        c.send(b"CLS\n")
        c.send(wire.rdy(5))
        c.send(b"NOP\n")
    want = [f"PROTOCOL(V2): [{remote}] upgrading connection to deflate (level 3)",
            f"PROTOCOL(V2): [{other}] REQ timeout 1000000000 out of range 0-3600000. Setting to 3600000",
            f"PROTOCOL(V2): [{other}] ignoring RDY after CLS in state ClientStateV2Closing"]
    wait_for(lambda: all(w in broker.log_text() for w in want),
             what=lambda: f"missing {[w for w in want if w not in broker.log_text()]}")


def test_lookupd_connection_lines(make_broker, tmp_path):
    """Acceptor 0's registrar: nsqd's lines for adding a lookupd, connecting, its peer
    info, and each registration it sends."""
    from nsqmp.lookupd.launcher import Lookupd

    lookupd = Lookupd("-broadcast-address=127.0.0.1", log_path=tmp_path / "lookupd.log").start()
    try:
        addr = lookupd.tcp_address
        b = make_broker("--broadcast-address", "127.0.0.1", "--lookupd-tcp-address", addr)
        wait_for(lambda: f"LOOKUPD({addr}): peer info" in b.log_text(), what="connected")
        with Connection.connect(b.tcp_address) as c:
            c.pub("lookup_logs_t", b"x")
        want = [f"LOOKUP({addr}): adding peer", f"LOOKUP connecting to {addr}",
                f"LOOKUPD({addr}): topic REGISTER lookup_logs_t", "TOPIC(lookup_logs_t): created"]
        wait_for(lambda: all(w in b.log_text() for w in want),
                 what=lambda: f"missing {[w for w in want if w not in b.log_text()]}")
    finally:
        assert lookupd.stop() == 0
