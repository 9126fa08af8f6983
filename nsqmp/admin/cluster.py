"""Gathering from brokers and lookupds over their HTTP APIs (nsqadmin's clusterinfo/data.go).

Every fan-out runs concurrently with per-request timeouts. A failed peer never fails the answer
unless every peer asked failed (`AllFailed`, nsqadmin's 502 UPSTREAM_ERROR); otherwise its error
is collected in `Errors` (nsqadmin's PartialErr: the "WARNING: ..." message; ours also keeps
which node failed so the UI can mark its row).
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import ctypes.util
import os
from dataclasses import dataclass, field
from typing import Any, Iterator
from urllib.parse import quote

import aiohttp
import orjson

from nsqmp.admin import stats as S


def _libc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _libc_trim()


def give_back_memory() -> None:
    """glibc keeps the heap pages of freed big /stats answers (its mmap threshold grows with
    them); malloc_trim returns them, so the admin's RSS stays near its live data."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off for a synchronous stretch (no await inside): parsing a broker's /stats
    allocates ~100,000 dicts and cutting it ~10,000 tuples, and the collections that triggers
    scan the big parsed tree again and again (for 3 MB: the parse 59 -> 27 ms, the cut 28 ->
    6 ms); parsed JSON and the cut tuples have no cycles to find."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def loads(body: bytes) -> Any:
    """orjson.loads with the cyclic GC paused (gc_paused says why)."""
    with gc_paused():
        return orjson.loads(body)


class AllFailed(Exception):
    """Every peer asked failed: nsqadmin's non-partial error (502 UPSTREAM_ERROR)."""


@dataclass
class Errors:
    """The partial errors of one answer: (node, text) in the order they happened."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, node: str, text: str) -> None:
        """Record one peer's failure."""
        self.items.append((node, text))

    def message(self) -> str:
        """nsqadmin's maybeWarnMsg over its ErrList texts ("" when nothing failed)."""
        return "WARNING: " + "\n".join(t for _, t in self.items) if self.items else ""

    def as_json(self) -> list[dict]:
        """nsqmp's per-node list: [{"node", "error"}]."""
        return [{"node": n, "error": t} for n, t in self.items]


class PeerError(Exception):
    """One request to one peer failed; str() is Go's http client wording."""


def _go_reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = exc.os_error
        text = os.strerror(err.errno).lower() if getattr(err, "errno", None) else str(err)
        return f"dial tcp {exc.host}:{exc.port}: connect: {text}"
    return str(exc) or type(exc).__name__


def _bad_status(status: int, reason: str | None, body: bytes) -> str:
    """Go's http_api client wording: got response 404 Not Found "<body, %q-quoted>"."""
    return f"got response {status} {reason or ''} {orjson.dumps(body.decode(errors='replace')).decode()}"


async def _read(resp: aiohttp.ClientResponse) -> bytes | bytearray:
    """The body, read into one buffer of its Content-Length: resp.read() keeps the chunks and
    then joins them, twice a broker's few-MB /stats at the peak."""
    size = resp.content_length
    if not size:
        return await resp.read()
    buf = bytearray(size)
    view, pos = memoryview(buf), 0
    async for chunk in resp.content.iter_any():
        if pos + len(chunk) > size:
            raise aiohttp.ClientPayloadError("body longer than its Content-Length")
        view[pos:pos + len(chunk)] = chunk
        pos += len(chunk)
    view.release()
    if pos != size:
        raise aiohttp.ClientPayloadError("body shorter than its Content-Length")
    return buf


def producer_http_address(p: dict) -> str:
    """Producer.HTTPAddress: broadcast_address:http_port (brackets for IPv6)."""
    host = p.get("broadcast_address", "")
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{p.get('http_port', 0)}"


def _semver(text: str) -> tuple[int, ...]:
    core = text.split("-")[0].split("+")[0].split(".")
    try:
        return tuple(int(x) for x in core[:3]) if len(core) == 3 else (0, 0, 0)
    except ValueError:
        return (0, 0, 0)


class Cluster:
    """The brokers and lookupds one admin watches, and nsqadmin's ways of asking them."""

    def __init__(self, session: aiohttp.ClientSession, lookupds: list[str], nsqds: list[str],
                 timeout: aiohttp.ClientTimeout | None = None) -> None:
        self.session = session
        self.lookupds = list(lookupds)
        self.nsqds = list(nsqds)
        self.timeout = timeout or aiohttp.ClientTimeout(total=5.0, sock_connect=2.0)
        # whole-broker /stats answers in flight at once (all requests together): each is a few
        # MB read then parsed, so this bounds the admin's peak memory on a big cluster; the
        # parsing is serial in this one thread anyway, so little latency is lost
        self.big = asyncio.Semaphore(2)
        # bumped by every POST to a peer (an action): gatherings begun before are stale (gather.py)
        self.generation = 0

    # -- one request ------------------------------------------------------------------------
    async def get(self, url: str, parse: bool = True) -> Any:
        """GET a V1 JSON answer; unwraps pre-1.0 nsqd's {"status_code", "data"} envelope
        (parse False: the body's bytes, unparsed)."""
        try:
            async with self.session.get(url, headers={"Accept": "application/vnd.nsq; version=1.0"},
                                        timeout=self.timeout) as resp:
                body = await _read(resp)
                if resp.status != 200:
                    raise PeerError(_bad_status(resp.status, resp.reason, body))
        except PeerError:
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise PeerError(f'Get "{url}": {_go_reason(exc)}') from None
        if not parse:
            return body
        try:
            data = loads(body)
        except orjson.JSONDecodeError as exc:
            raise PeerError(f"invalid JSON from {url}: {exc}") from None
        if isinstance(data, dict) and "status_code" in data and "data" in data:
            data = data["data"]
        return data

    async def post(self, url: str) -> None:
        """POST with an empty body (nsqd's and nsqlookupd's action endpoints)."""
        self.generation += 1  # before and after: a gathering begun meanwhile is stale too
        try:
            async with self.session.post(url, headers={"Accept": "application/vnd.nsq; version=1.0"},
                                         timeout=self.timeout) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise PeerError(_bad_status(resp.status, resp.reason, body))
        except PeerError:
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise PeerError(f'Post "{url}": {_go_reason(exc)}') from None
        finally:
            self.generation += 1

    async def _fan(self, items: list, fetch, errors: Errors, kind: str, node=str) -> list:
        """Run fetch(item) for every item at once; failures go to `errors` under node(item);
        all failed -> AllFailed (nsqadmin's "failed to query any <kind>")."""
        results = await asyncio.gather(*(fetch(i) for i in items), return_exceptions=True)
        ok, failed = [], []
        for item, res in zip(items, results):
            if isinstance(res, PeerError):
                failed.append((node(item), str(res)))
            elif isinstance(res, BaseException):
                raise res
            else:
                ok.append(res)
        if items and len(failed) == len(items):
            raise AllFailed(f"failed to query any {kind}: " + "\n".join(t for _, t in failed))
        for addr, text in failed:
            errors.add(addr, text)
        return ok

    # -- topics -----------------------------------------------------------------------------
    async def topics(self, errors: Errors) -> list[str]:
        """GetLookupdTopics: every topic name the lookupds know, sorted, unique (with nsqd
        addresses instead, the names come from the shared gathering: gather.py)."""
        got = await self._fan(self.lookupds, lambda a: self.get(f"http://{a}/topics"), errors, "nsqlookupd")
        return sorted({t for r in got for t in (r.get("topics") or ())})

    async def lookupd_topic_channels(self, topic: str, errors: Errors) -> list[str]:
        """GetLookupdTopicChannels: the union of a topic's channels on every lookupd."""
        got = await self._fan(self.lookupds, lambda a: self.get(f"http://{a}/channels?topic={quote(topic)}"),
                              errors, "nsqlookupd")
        return sorted({c for r in got for c in (r.get("channels") or ())})

    # -- producers --------------------------------------------------------------------------
    async def producers(self, errors: Errors, topics: bool = True) -> list[dict]:
        """GetProducers: nsqadmin's node list, from the lookupds' /nodes or each nsqd's /info
        (and /stats for their topics unless `topics` is False)."""
        if self.lookupds:
            return await self._lookupd_producers(errors)
        return await self._nsqd_producers(self.nsqds, None, errors, topics)

    async def topic_producers(self, topic: str, errors: Errors) -> list[dict]:
        """GetTopicProducers: the brokers that have `topic`."""
        if self.lookupds:
            got = await self._fan(self.lookupds, lambda a: self.get(f"http://{a}/lookup?topic={quote(topic)}"),
                                  errors, "nsqlookupd")
            out: dict[str, dict] = {}
            for r in got:
                for p in r.get("producers") or ():
                    out.setdefault(producer_http_address(p), _producer(p))
            return list(out.values())
        return await self._nsqd_producers(self.nsqds, topic, errors)

    async def _lookupd_producers(self, errors: Errors) -> list[dict]:
        async def one(addr: str) -> tuple[str, list]:
            return addr, (await self.get(f"http://{addr}/nodes")).get("producers") or []

        by_tcp: dict[str, dict] = {}
        for addr, found in await self._fan(self.lookupds, one, errors, "nsqlookupd"):
            for raw in found:
                host = raw.get("broadcast_address", "")
                key = f"{host}:{raw.get('tcp_port', 0)}"
                p = by_tcp.get(key)
                if p is None:
                    p = by_tcp[key] = _producer(raw)
                    p["topics"] = sorted(p["topics"], key=lambda t: t["topic"]) if p["topics"] else None
                    p["remote_addresses"] = []
                p["remote_addresses"].append(f"{addr}/{raw.get('remote_address') or 'N/A'}")
        newest = max((_semver(p["version"]) for p in by_tcp.values()), default=(0, 0, 0))
        for p in by_tcp.values():
            p["out_of_date"] = _semver(p["version"]) < newest
        return sorted(by_tcp.values(), key=lambda p: p["hostname"])

    async def _nsqd_producers(self, addrs: list[str], topic: str | None, errors: Errors,
                              topics: bool = True) -> list[dict]:
        """GetNSQDProducers (topic None) or GetNSQDTopicProducers: /info + /stats of each nsqd."""
        async def one(addr: str) -> dict | None:
            q = f"&topic={quote(topic)}" if topic is not None else ""
            if topic is None:
                info = await self.get(f"http://{addr}/info")
            names: list[str] = []
            if topics or topic is not None:
                async with self.big:
                    st = await self.get(f"http://{addr}/stats?format=json&include_clients=false&include_mem=false{q}")
                names = [t["topic_name"] for t in st.get("topics") or ()]
                del st
            if topic is not None:
                if topic not in names:
                    return None
                info = await self.get(f"http://{addr}/info")
            if not info.get("broadcast_address"):
                host, _, port = addr.rpartition(":")
                info = dict(info, broadcast_address=host, http_port=int(port))
            if not info.get("hostname"):
                info = dict(info, hostname=addr.rpartition(":")[0])
            p = _producer({k: info.get(k) for k in ("version", "broadcast_address", "hostname",
                                                    "http_port", "tcp_port")})
            p["topics"] = [{"topic": n, "tombstoned": False} for n in names] or None
            p["remote_addresses"] = None
            return p

        return [p for p in await self._fan(addrs, one, errors, "nsqd") if p is not None]

    # -- stats ------------------------------------------------------------------------------
    async def node_stats(self, producers: list[dict], topic: str, channel: str, clients: bool,
                         errors: Errors) -> list[dict]:
        """GetNSQDStats' per-node part: each producer's topics as nsqadmin's TopicStats rows,
        sorted by hostname (only `topic` when given)."""
        def rows(raw: dict, addr: str, hostname: str) -> list[dict]:
            now = S.now_seconds()
            return [S.topic_node(t, addr, hostname, now) for t in raw.get("topics") or ()
                    if not topic or t.get("topic_name") == topic]

        out = [t for part in await self.node_reduce(producers, rows, errors, topic, channel, clients)
               for t in part]
        out.sort(key=lambda t: t["hostname"])
        return out

    async def node_reduce(self, producers: list[dict], reduce, errors: Errors, topic: str = "",
                          channel: str = "", clients: bool = False, parse: bool = True) -> list:
        """reduce(raw /stats, node, hostname) for each producer, applied as soon as its answer is
        parsed, so one broker's big parsed /stats is all the memory held at a time (parse False:
        reduce gets the body's bytes and parses them itself)."""
        async def one(p: dict):
            addr = producer_http_address(p)
            url = f"http://{addr}/stats?format=json"
            if topic:
                url += "&topic=" + quote(topic)
                if channel:
                    url += "&channel=" + quote(channel)
            if not clients:
                url += "&include_clients=false&include_mem=false"
            async with self.big:
                raw = await self.get(url, parse)
            with gc_paused():
                return reduce(raw, addr, p.get("hostname", ""))

        try:
            return await self._fan(producers, one, errors, "nsqd", producer_http_address)
        finally:
            if len(producers) > 1 or not topic:  # a whole cluster's or node's /stats
                give_back_memory()

    # -- actions ----------------------------------------------------------------------------
    async def post_all(self, addrs: list[str], uri: str, qs: str, errors: Errors) -> None:
        """nsqlookupdPOST/producersPOST: POST to every address; each failure is a partial error."""
        results = await asyncio.gather(*(self.post(f"http://{a}/{uri}?{qs}") for a in addrs),
                                       return_exceptions=True)
        for addr, res in zip(addrs, results):
            if isinstance(res, PeerError):
                errors.add(addr, str(res))
            elif isinstance(res, BaseException):
                raise res


def _producer(raw: dict) -> dict:
    """nsqadmin's Producer from a lookupd's producer (topics + tombstones zipped)."""
    topics = raw.get("topics") or []
    tomb = raw.get("tombstones") or []
    return {
        "remote_addresses": None, "remote_address": raw.get("remote_address", "") or "",
        "hostname": raw.get("hostname", "") or "", "broadcast_address": raw.get("broadcast_address", "") or "",
        "tcp_port": raw.get("tcp_port", 0) or 0, "http_port": raw.get("http_port", 0) or 0,
        "version": raw.get("version", "") or "",
        "topics": [{"topic": t, "tombstoned": bool(tomb[i]) if i < len(tomb) else False}
                   for i, t in enumerate(topics)] or None,
        "out_of_date": False,
    }
