"""The topic curve of ``folio bench gateway --topics 1,10,100,1000``: one load over N topics.

Owns: publishing the same load, ``window`` messages of 100 B in flight one per
WebSocket frame, spread over N fresh topics (one producer session per topic, on
the gateway that owns it, found by lookup as a Pulsar client does), for
``seconds``; one row per N. Rule: the spread is even (each ok reply sends the
next message on the next topic in turn, so every topic gets 1/N of the
messages and the total in flight stays ``window``), only ``ok`` replies count,
sessions are opened and the topics loaded before the clock and CPU accounting
start. The client is the picows one (``folio.bench_ws_client``): each reply is
handled in its frame callback, which sends the next message there, with no
task or coroutine per message. A session the gateway closes mid-run (the topic
moved) is not reopened: what it had in flight counts as errors and the row
says how many sessions closed. A refused lookup or connect (a gateway busy
loading topics answers 408) is tried again, ``CONNECT_TRIES`` times at most. Bounded:
lookups and connects at most ``CONNECT_PARALLEL`` at a time, the run by ``seconds`` plus a drain timeout.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import httpx
import orjson

from folio.bench_gateway_load import DRAIN_S, LoadResult, lookup, producer_url
from folio.bench_ws_client import FrameSession, open_session
from storage.formats.errors import MessageIdError
from storage.formats.message_id import MessageId

CONNECT_PARALLEL = 32
CONNECT_TRIES = 4  # a session refused while the gateway loads hundreds of topics is tried again
CONNECT_RETRY_S = 1.0
T = TypeVar("T")
PAYLOAD_BYTES = 100


def parse_topics(text: str) -> tuple[int, ...]:
    """``--topics 1,10,100,1000`` -> (1, 10, 100, 1000); empty -> () (pure)."""
    if not text.strip():
        return ()
    try:
        counts = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SystemExit(f"--topics: expected counts like 1,10,100,1000, got {text!r}") from None
    if not counts or any(n < 1 or n > 100_000 for n in counts):
        raise SystemExit(f"--topics: each count must be 1..100000, got {text!r}")
    return counts


async def bounded_gather(jobs: Sequence[Callable[[], Awaitable[T]]], parallel: int) -> list[T]:
    """Run ``jobs`` at most ``parallel`` at a time; results in order."""
    gate = asyncio.Semaphore(parallel)

    async def one(job: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await job()

    return list(await asyncio.gather(*(one(job) for job in jobs)))


class Spread:
    """The running load: a shared window over N sessions, refilled round robin from frame callbacks."""

    def __init__(self, topics: int, window: int, seconds: float) -> None:
        self.result = LoadResult()
        self.sessions: list[FrameSession] = []
        self.inflight = [0] * topics
        self.total_inflight = 0
        self.window = window
        self.cursor = 0
        self.sent_at: list[float] = []
        self.deadline = 0.0
        self.seconds = seconds
        self.closed_sessions = 0
        self.message_ids: list[str] = []  # of the ok replies: read after the run (entries per message)
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.head = b'{"payload":"' + base64.b64encode(os.urandom(PAYLOAD_BYTES)) + b'","context":"'

    def send_next(self) -> bool:
        """One message on the next open session in turn; False if none is open."""
        n = len(self.sessions)
        for _ in range(n):
            index = self.cursor % n
            self.cursor += 1
            session = self.sessions[index]
            if session.is_open:
                seq = len(self.sent_at)
                self.sent_at.append(time.perf_counter())
                self.inflight[index] += 1
                self.total_inflight += 1
                session.send(self.head + str(seq).encode() + b'"}')
                return True
        return False

    def reply(self, index: int, raw: bytes) -> None:
        reply = orjson.loads(raw)
        now = time.perf_counter()
        self.inflight[index] -= 1
        self.total_inflight -= 1
        if reply.get("result") == "ok":
            self.result.ok += 1
            self.message_ids.append(reply["messageId"])
            self.result.latencies_ms.append((now - self.sent_at[int(reply["context"])]) * 1e3)
        else:
            self.result.error(str(reply.get("errorMsg") or reply))
        self.refill(now)

    def refill(self, now: float) -> None:
        if now < self.deadline:
            while self.total_inflight < self.window and self.send_next():
                pass
        elif self.total_inflight == 0 and not self.done.done():
            self.done.set_result(None)

    def session_closed(self, index: int, closed: asyncio.Future[int]) -> None:
        code = closed.result()
        lost = self.inflight[index]
        self.inflight[index] = 0
        self.total_inflight -= lost
        self.closed_sessions += 1
        if self.deadline and not self.done.done():
            self.result.error(f"session closed ({code}); {lost} in flight, fate unknown", lost)
            self.refill(time.perf_counter())

    def start(self) -> float:
        start = time.perf_counter()
        self.deadline = start + self.seconds
        self.refill(start)
        return start


async def retrying(job: Callable[[], Awaitable[T]]) -> T:
    """``job()``, tried again after a failure (a gateway busy loading hundreds of topics may
    answer a lookup or a handshake 408), ``CONNECT_TRIES`` times at most."""
    for attempt in range(CONNECT_TRIES - 1):
        try:
            return await job()
        except Exception:
            await asyncio.sleep(CONNECT_RETRY_S * (attempt + 1))
    return await job()


async def open_spread(http_base: str, names: Sequence[str], window: int, seconds: float) -> Spread:
    """Look each topic's owner up and open its producer session (loads the topic)."""
    spread = Spread(len(names), window, seconds)
    lookups = [functools.partial(retrying, functools.partial(lookup, http_base, t)) for t in names]
    owners = await bounded_gather(lookups, CONNECT_PARALLEL)

    def opener(index: int) -> Callable[[], Awaitable[FrameSession]]:
        url = producer_url(owners[index][0], names[index])
        return lambda: retrying(lambda: open_session(url, lambda _session, raw: spread.reply(index, raw)))

    spread.sessions = await bounded_gather([opener(i) for i in range(len(names))], CONNECT_PARALLEL)
    for index, session in enumerate(spread.sessions):
        session.closed.add_done_callback(functools.partial(spread.session_closed, index))
    return spread


async def run_spread(spread: Spread) -> LoadResult:
    """Publish until the deadline, then wait (bounded) for what is in flight."""
    start = spread.start()
    result = spread.result
    try:
        await asyncio.wait_for(asyncio.shield(spread.done), spread.seconds + DRAIN_S)
    except TimeoutError:
        result.error(f"timed out with {spread.total_inflight} replies outstanding", spread.total_inflight)
    result.seconds = time.perf_counter() - start
    result.capped_by_time = True
    return result


async def close_spread(spread: Spread) -> None:
    await bounded_gather([s.close for s in spread.sessions], CONNECT_PARALLEL * 4)


def messages_per_entry(message_ids: Sequence[str]) -> float | None:
    """How many acked messages each stored entry carried on average: the gateway packs the
    messages a topic has waiting into one entry, so with the same load over more topics each
    entry carries fewer and every per-entry cost (on the gateway and on each storage node)
    weighs on fewer messages. None without ids or if one does not parse."""
    try:
        entries = {(m.ledger_id, m.entry_id) for m in map(MessageId.from_base64, message_ids)}
    except MessageIdError:
        return None
    return len(message_ids) / len(entries) if entries else None


SYNCS_METRIC = "folio_journal_sync_seconds_count"
ADDS_METRIC = "folio_node_adds_total"


def node_counters(text: str) -> tuple[float, float]:
    """(journal syncs, entries added) from a storage node's /metrics text (pure)."""
    values = {SYNCS_METRIC: 0.0, ADDS_METRIC: 0.0}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in values:
            values[name] = float(value)
    return values[SYNCS_METRIC], values[ADDS_METRIC]


async def scrape_nodes(metrics_urls: Sequence[str]) -> tuple[float, float]:
    """Journal syncs and entries added, summed over the storage nodes (0, 0 if none answer)."""
    syncs = adds = 0.0
    async with httpx.AsyncClient(timeout=5.0) as http:
        for url in metrics_urls:
            try:
                response = await http.get(url)
            except httpx.HTTPError:
                continue
            got = node_counters(response.text)
            syncs, adds = syncs + got[0], adds + got[1]
    return syncs, adds
