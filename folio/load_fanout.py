"""Fan-out load: many consumers on one topic, deliveries relayed through the non-owner gateway.

Owns: the two overload workloads ``folio bench fanout`` and the load tests run
(real gateways, real WebSocket clients), and what they measure - never a
throughput claim, only whether the gateways stay up, keep their leases and
deliver everything, and how much memory the owner holds:

- ``run_fanout``: ``consumers`` Shared consumers, each on its own
  subscription, connected to the gateway that does *not* own the topic (so
  every delivery is relayed), one producer publishing ``rate`` msg/s for
  ``seconds``; every consumer reads and acks. Result: messages acknowledged to
  the producer, how many each consumer got, which closes they saw;
- ``run_stuck``: ``stuck`` consumers that never read (each its own
  subscription; raw sockets with tiny receive buffers, ``folio.ws_stuck``)
  plus one consumer that reads, under ``bursts`` REST batches of ``burst``
  messages; result: the closes the stuck ones saw and what the reading one got.

A ``Watch`` samples the gateways' RSS (``/proc``) and whether they are alive
while a workload runs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx
import orjson
import websockets
from websockets.asyncio.client import ClientConnection

from folio.bench_gateway_load import TOPIC_PATH, lookup
from folio.ws_stuck import StuckSocket

CONNECT_S = 30.0
CONNECT_PARALLEL = 50  # handshakes at once while the consumers connect
SAMPLE_S = 0.25
PRODUCER_ATTEMPTS = 10  # sessions the producer opens before it gives up


def rss_bytes(pid: int) -> int:
    """Resident set of ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0
    return 0


@dataclass
class Watch:
    """Samples RSS and liveness of gateway processes every ``SAMPLE_S`` while it runs."""

    pids: Sequence[int]
    alive: Callable[[], list[bool]]
    rss_max: dict[int, int] = field(default_factory=dict)
    rss_start: dict[int, int] = field(default_factory=dict)
    died: list[int] = field(default_factory=list)  # pids seen gone, in order
    _task: asyncio.Task[None] | None = None

    def start(self) -> Watch:
        self.rss_start = {pid: rss_bytes(pid) for pid in self.pids}
        self.rss_max = dict(self.rss_start)
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def sample(self) -> None:
        for pid, up in zip(self.pids, self.alive(), strict=True):
            if not up and pid not in self.died:
                self.died.append(pid)
            self.rss_max[pid] = max(self.rss_max.get(pid, 0), rss_bytes(pid))

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_S)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()


def consumer_url(ws_base: str, topic: str, sub: str, queue: int) -> str:
    query = f"subscriptionType=Shared&subscriptionInitialPosition=Earliest&receiverQueueSize={queue}"
    return f"{ws_base}/ws/v2/consumer/{TOPIC_PATH}/{topic}/{sub}?{query}"


def _seq_payload(seq: int, size: int) -> str:
    return base64.b64encode(seq.to_bytes(8, "big") + b"x" * max(0, size - 8)).decode()


async def _connect_all(urls: list[str]) -> list[ClientConnection]:
    gate = asyncio.Semaphore(CONNECT_PARALLEL)

    async def one(url: str) -> ClientConnection:
        async with gate:
            return await websockets.connect(
                url, open_timeout=CONNECT_S, max_size=None, compression=None, ping_interval=None
            )

    return list(await asyncio.gather(*(one(u) for u in urls)))


async def _owner_and_other(http_urls: Sequence[str], topic: str) -> tuple[str, str]:
    """Create and load ``topic`` (one REST message), then (owner http url, the other's)."""
    async with httpx.AsyncClient(timeout=CONNECT_S) as http:
        body = {"messages": [{"payload": _seq_payload(0, 8), "payloadEncoding": "base64"}]}
        response = await http.post(f"{http_urls[0]}/topics/{TOPIC_PATH}/{topic}", json=body)
        response.raise_for_status()
    _, owner = await lookup(http_urls[0], topic)
    others = [u for u in http_urls if u.rstrip("/") != owner.rstrip("/")]
    return owner, others[0] if others else owner


def _ws(http_url: str) -> str:
    return http_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)


@dataclass
class ConsumerTally:
    seqs: set[int] = field(default_factory=set)
    close_code: int | None = None
    close_reason: str = ""


async def _read_and_ack(ws: ClientConnection, tally: ConsumerTally) -> None:
    try:
        async for frame in ws:
            msg = orjson.loads(frame)
            if "payload" not in msg:
                continue
            seq = int.from_bytes(base64.b64decode(msg["payload"])[:8], "big")
            if seq:
                tally.seqs.add(seq)
            await ws.send(orjson.dumps({"messageId": msg["messageId"]}).decode())
    except websockets.ConnectionClosed:
        pass
    if ws.close_code is not None:
        tally.close_code, tally.close_reason = ws.close_code, ws.close_reason or ""


async def _produce(
    http_url: str,
    topic: str,
    rate: float,
    seconds: float,
    payload: int,
    published: set[int],
    drain_s: float,
    say: Callable[[str], None],
) -> int:
    """Publish ``rate`` msg/s for ``seconds`` through a WebSocket producer on the owner
    (looked up again after a close); adds acknowledged sequence numbers to ``published``.
    Returns how many were refused or lost in a closed session."""
    errors = 0
    total = int(rate * seconds)
    started = time.monotonic()
    seq = 1
    attempts = 0
    while seq <= total and attempts < PRODUCER_ATTEMPTS:
        attempts += 1
        try:
            owner = (await lookup(http_url, topic))[1]
            async with websockets.connect(
                f"{_ws(owner)}/ws/v2/producer/{TOPIC_PATH}/{topic}", open_timeout=CONNECT_S
            ) as producer:
                in_flight: set[int] = set()

                async def replies(ws: ClientConnection = producer, waiting: set[int] = in_flight) -> None:
                    nonlocal errors
                    async for frame in ws:
                        reply = orjson.loads(frame)
                        waiting.discard(int(reply["context"]))
                        if reply.get("result") == "ok":
                            published.add(int(reply["context"]))
                        else:
                            errors += 1

                reply_task = asyncio.create_task(replies())
                try:
                    while seq <= total:
                        delay = started + (seq - 1) / rate - time.monotonic()
                        if delay > 0:
                            await asyncio.sleep(delay)
                        in_flight.add(seq)
                        frame = {"payload": _seq_payload(seq, payload), "context": str(seq)}
                        await producer.send(orjson.dumps(frame).decode())
                        seq += 1
                    deadline = time.monotonic() + drain_s
                    while in_flight and time.monotonic() < deadline and not reply_task.done():
                        await asyncio.sleep(0.1)
                finally:
                    reply_task.cancel()
                    await asyncio.gather(reply_task, return_exceptions=True)
                    errors += len(in_flight)
        except (websockets.ConnectionClosed, OSError, httpx.HTTPError, TimeoutError) as exc:
            say(f"producer: {exc!r}; reconnecting")
            await asyncio.sleep(1.0)
    return errors + total - seq + 1  # never sent: the producer gave up


@dataclass
class FanoutResult:
    consumers: int
    published: int  # acknowledged to the producer
    publish_errors: int
    deliveries: int  # distinct (consumer, message) pairs received
    complete: int  # consumers that got every acknowledged message
    closes: Counter[int]
    seconds: float

    @property
    def missing(self) -> int:
        return self.consumers * self.published - self.deliveries


async def run_fanout(
    http_urls: Sequence[str],
    *,
    consumers: int,
    rate: float,
    seconds: float,
    payload: int = 100,
    queue: int = 1000,
    drain_s: float = 60.0,
    say: Callable[[str], None] = print,
) -> FanoutResult:
    """``consumers`` reading consumers through the non-owner gateway, ``rate`` msg/s for ``seconds``."""
    topic = f"fanout-{secrets.token_hex(4)}"
    owner, other = await _owner_and_other(http_urls, topic)
    say(f"topic {topic}: owner {owner}, consumers relayed through {other}")
    urls = [consumer_url(_ws(other), topic, f"s{i}", queue) for i in range(consumers)]
    conns = await _connect_all(urls)
    tallies = [ConsumerTally() for _ in conns]
    readers = [asyncio.create_task(_read_and_ack(ws, t)) for ws, t in zip(conns, tallies, strict=True)]
    say(f"{consumers} consumers connected")
    published: set[int] = set()
    started = time.monotonic()
    errors = await _produce(http_urls[0], topic, rate, seconds, payload, published, drain_s, say)
    deadline = time.monotonic() + drain_s
    while time.monotonic() < deadline and not all(published <= t.seqs for t in tallies):
        if all(r.done() for r in readers):
            break
        await asyncio.sleep(0.2)
    elapsed = time.monotonic() - started
    closes = Counter(t.close_code for t in tallies if t.close_code is not None)  # before ours
    for ws in conns:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), 2)
    for task in readers:
        task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    return FanoutResult(
        consumers=consumers,
        published=len(published),
        publish_errors=errors,
        deliveries=sum(len(published & t.seqs) for t in tallies),
        complete=sum(1 for t in tallies if published <= t.seqs),
        closes=closes,
        seconds=elapsed,
    )


@dataclass
class StuckResult:
    stuck: int
    published: int
    closes: Counter[int]  # close code each drained stuck consumer saw (1006: dropped, 0: still open)
    reader_got: int  # distinct messages the reading consumer received
    reader_close: int | None
    seconds: float  # from the first burst until the reader had everything (or gave up)


async def _open_stuck(urls: list[str]) -> list[StuckSocket]:
    gate = asyncio.Semaphore(CONNECT_PARALLEL)

    async def one(url: str) -> StuckSocket:
        async with gate:
            return await StuckSocket.open(url, timeout_s=CONNECT_S)

    return list(await asyncio.gather(*(one(u) for u in urls)))


async def run_stuck(
    http_urls: Sequence[str],
    *,
    stuck: int,
    bursts: int,
    burst: int = 300,
    payload: int = 1024,
    pause_s: float = 1.0,
    queue: int = 1000,
    sample: int | None = None,
    drain_s: float = 5.0,
    say: Callable[[str], None] = print,
) -> StuckResult:
    """``stuck`` consumers that never read (``folio.ws_stuck``: raw sockets, tiny receive
    buffers) and one that does, all on the owner, under ``bursts`` REST batches of
    ``burst`` messages of ``payload`` bytes; at the end the first ``sample`` stuck ones
    (default: all) read what they were sent for up to ``drain_s``, to see how they were
    closed."""
    topic = f"stuck-{secrets.token_hex(4)}"
    owner, _ = await _owner_and_other(http_urls, topic)
    stuck_conns = await _open_stuck([consumer_url(_ws(owner), topic, f"s{i}", queue) for i in range(stuck)])
    say(f"{stuck} consumers that never read connected to the owner {owner}")
    reader = await websockets.connect(
        consumer_url(_ws(owner), topic, "reader", queue), open_timeout=CONNECT_S
    )
    tally = ConsumerTally()
    reading = asyncio.create_task(_read_and_ack(reader, tally))
    published = 0
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=60) as http:
        for round_ in range(bursts):
            first = round_ * burst + 1
            body = {
                "messages": [
                    {"payload": _seq_payload(seq, payload), "payloadEncoding": "base64"}
                    for seq in range(first, first + burst)
                ]
            }
            response = await http.post(f"{owner}/topics/{TOPIC_PATH}/{topic}", json=body)
            response.raise_for_status()
            results = response.json()["messagePublishResults"]
            say(f"burst {round_ + 1}/{bursts} published")
            published += sum(1 for r in results if r.get("errorCode") == 0)
            await asyncio.sleep(pause_s)
    deadline = time.monotonic() + 30
    while len(tally.seqs) < published and time.monotonic() < deadline and not reading.done():
        await asyncio.sleep(0.1)
    seconds = time.monotonic() - started
    drained = stuck_conns[:sample]
    say(f"reader got {len(tally.seqs)} of {published}; reading what {len(drained)} stuck consumers were sent")
    codes = await asyncio.gather(*(conn.close_code(drain_s) for conn in drained))
    closes = Counter(c if c is not None else 0 for c in codes)
    for conn in stuck_conns:
        conn.abort()
    reader.transport.abort()
    reading.cancel()
    await asyncio.gather(reading, return_exceptions=True)
    return StuckResult(stuck, published, closes, len(tally.seqs), tally.close_code, seconds)


def mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def alive_of(pids: Sequence[int]) -> Callable[[], list[bool]]:
    return lambda: [pid_alive(p) for p in pids]
