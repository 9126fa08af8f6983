"""A V2 connection as nsqd's /stats shows a client: ClientV2Stats, the TLS fields of its
prettyConnectionState, and the Go names of TLS suites and versions."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nsqmp.acceptor.upgrade import ssl_object

if TYPE_CHECKING:
    from nsqmp.acceptor.tcp import V2Connection


def client_stats(conn: V2Connection, topic: str | None) -> dict:
    """nsqd's ClientV2Stats of this connection for /stats "producers" (pub_counts of
    `topic` only, when given). The consumer counters live on the router: a connection
    that also consumes shows its RDY here but 0 in flight, sent, finished, requeued."""
    s = conn.settings
    counts = [{"topic": t.decode(), "count": n}
              for t, n in conn.pub_counts.items() if topic is None or t.decode() == topic]
    return {
        "client_id": s.client_id, "hostname": s.hostname, "version": "V2",
        "remote_address": conn.remote, "state": conn.state, "ready_count": conn.rdy,
        "in_flight_count": 0, "message_count": 0, "finish_count": 0, "requeue_count": 0,
        "connect_ts": conn.connect_ts, "sample_rate": s.sample_rate,
        "deflate": s.deflate, "snappy": s.snappy, "user_agent": s.user_agent,
        **conn.auth.stats(),
        **({"pub_counts": counts} if counts else {}),
        "tls": conn.tls, **tls_stats(conn),
        "topology_zone": "", "topology_region": "",
        "nsqmp_acceptor": conn.host.index,
    }


def tls_stats(conn: V2Connection) -> dict:
    """nsqd's TLS fields of a client's /stats (its prettyConnectionState)."""
    obj = ssl_object(conn)
    if obj is None:
        return {"tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
                "tls_negotiated_protocol_is_mutual": False}
    cipher = obj.cipher()
    return {
        "tls_cipher_suite": go_cipher_suite(cipher[0] if cipher else "", conn.host.tls_context),
        "tls_version": go_tls_version(obj.version() or ""),
        "tls_negotiated_protocol": obj.selected_alpn_protocol() or "",
        "tls_negotiated_protocol_is_mutual": True,  # Go: deprecated, always true
    }


# the suites nsqd names (prettyConnectionState.GetCipherSuite), by their OpenSSL names
_GO_SUITES = {
    "RC4-SHA": "TLS_RSA_WITH_RC4_128_SHA",
    "DES-CBC3-SHA": "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "AES128-SHA": "TLS_RSA_WITH_AES_128_CBC_SHA",
    "AES256-SHA": "TLS_RSA_WITH_AES_256_CBC_SHA",
    "ECDHE-ECDSA-RC4-SHA": "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "ECDHE-ECDSA-AES128-SHA": "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "ECDHE-ECDSA-AES256-SHA": "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "ECDHE-RSA-RC4-SHA": "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "ECDHE-RSA-DES-CBC3-SHA": "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "ECDHE-RSA-AES128-SHA": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "ECDHE-RSA-AES256-SHA": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
}
_GO_VERSIONS = {"SSLv3": "SSL30", "TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}


def go_cipher_suite(name: str, ctx: Any) -> str:
    """nsqd's name for a suite; any other is "Unknown <IANA number>", as nsqd prints it."""
    if name in _GO_SUITES:
        return _GO_SUITES[name]
    for c in ctx.get_ciphers() if ctx is not None else ():
        if c["name"] == name:
            return f"Unknown {c['id'] & 0xFFFF}"
    return f"Unknown {name}"


def go_tls_version(version: str) -> str:
    """nsqd's name for a TLS version (tls.VersionName's older spelling)."""
    return _GO_VERSIONS.get(version, f"Unknown {version}")
