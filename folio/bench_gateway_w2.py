"""W2 of ``folio bench gateway``: end-to-end latency at a fixed offered rate.

Owns: the paced producer (in the bench process) and the consumer, which runs
in a separate process (``python -m folio.bench_gateway_w2 consume ...``) as in
the peer harness (/work/shared/peers/peerlib.py). The producer stamps
``time.time_ns()`` into each 100 B payload just before sending it (first 8
bytes, big-endian, then the sequence number) and records send -> ok reply
(pub-ack latency); the consumer records receive time - stamp for every message
and acks it. Mode ``ws``: one frame per message, per-message delivery and
acks; ``ws-batch``: what is due at each tick goes in one batch frame, batched
delivery and acks. Pacing: the producer sends what is due, then sleeps until the next
message is due but at least one timer tick (1 ms: uvloop's timers count whole
milliseconds, so a shorter sleep returns at once and the loop spins a core
that the servers need); ``spin`` keeps the peer harness's loop (sleep
``max(0, due - now)``) for a like-for-like comparison. Bounded: the producer sends exactly ``rate * seconds``
messages, every wait has a timeout, the consumer stops at its deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import struct
import sys
import time
from asyncio.subprocess import PIPE
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import uvloop
import websockets

from folio.bench_gateway_load import DRAIN_S, Link, LoadResult, consumer_url, count_kind, producer_url

READY = "FOLIO-W2 READY"
PAYLOAD_BYTES = 100
CHILD_START_S = 30.0
SETTLE_S = 0.5
PACE_TICK_S = 0.001  # the event loop's timer resolution


@dataclass(frozen=True)
class W2Pace:
    rate: float  # offered msg/s
    seconds: float
    spin: bool = False  # sleep max(0, due - now) as the peer harness does

    @property
    def expected(self) -> int:
        return max(1, int(self.rate * self.seconds))

    def sleep_s(self, start: float, sent: int, now: float) -> float:
        """How long the producer sleeps after sending ``sent`` messages."""
        wait = start + sent / self.rate - now
        return max(0.0, wait) if self.spin else max(PACE_TICK_S, wait)


CHILD_LINE_MAX = 64 * 1024 * 1024
REPO = str(Path(__file__).resolve().parents[1])

CpuHook = Callable[[int], Callable[[], dict[str, float]]]  # child pid -> stop() -> CPU %


@dataclass
class W2Result:
    expected: int
    sent: int = 0
    send_seconds: float = 0.0
    ack_ms: list[float] = field(default_factory=list)
    replies: int = 0
    errors: int = 0
    first_error: str = ""
    e2e_ms: list[float] = field(default_factory=list)
    received: int = 0
    duplicates: int = 0
    reconnects: int = 0  # producer and consumer sessions opened again after the topic moved
    error_kinds: dict[str, int] = field(default_factory=dict)  # what each error was -> how many

    def error(self, message: str, count: int = 1) -> None:
        self.errors += count
        count_kind(self.error_kinds, message, count)
        if not self.first_error:
            self.first_error = message[:200]


def stamped(seq: int) -> bytes:
    return struct.pack(">QQ", time.time_ns(), seq) + b"L" * (PAYLOAD_BYTES - 16)


# ---------------------------------------------------------------- producer (bench process)


async def produce_paced(link: Link, pace: W2Pace, batched: bool, result: W2Result) -> None:
    """Send ``pace.expected`` messages at the offered rate. If the topic moves (4503), connect
    again through ``link``; what was in flight then counts as errors (fate unknown, not resent)."""
    expected = pace.expected
    sent_at = [0.0] * expected
    answered = bytearray(expected)
    ws = await link.connect()

    async def replies(ws: websockets.ClientConnection) -> None:
        while result.replies < expected:
            reply = orjson.loads(await ws.recv(decode=False))
            items = (reply.get("results") or []) if reply.get("type") == "batch" else [reply]
            now = time.perf_counter()
            for item in items:
                j = int(item["context"])
                if answered[j]:
                    continue
                answered[j] = 1
                result.replies += 1
                if item.get("result") == "ok":
                    result.ack_ms.append((now - sent_at[j]) * 1e3)
                else:
                    result.error(str(item.get("errorMsg") or item))

    async def moved(exc: websockets.ConnectionClosed, sent: int) -> websockets.ClientConnection:
        lost = [j for j in range(sent) if not answered[j]]
        for j in lost:
            answered[j] = 1
        result.replies += len(lost)
        return await link.reconnect(exc, result, len(lost))  # counts the move and the lost as errors

    loop = asyncio.get_running_loop()
    reader = loop.create_task(replies(ws))
    start = time.perf_counter()
    i = 0
    try:
        async with asyncio.timeout(pace.seconds + DRAIN_S):
            while i < expected or result.replies < expected:
                if reader.done():
                    exc = reader.exception()
                    if not isinstance(exc, websockets.ConnectionClosed):
                        break  # all replied (or a defect: ``reader.result`` re-raises it below)
                    ws = await moved(exc, i)
                    reader = loop.create_task(replies(ws))
                    continue
                if i == expected:
                    result.sent, result.send_seconds = i, time.perf_counter() - start
                    await asyncio.wait([reader])
                    continue
                due = min(expected, int((time.perf_counter() - start) * pace.rate) + 1)
                if due > i:
                    frames = []
                    for j in range(i, due):
                        sent_at[j] = time.perf_counter()
                        frames.append({"payload": base64.b64encode(stamped(j)).decode(), "context": str(j)})
                    try:
                        if batched:
                            await ws.send(orjson.dumps({"type": "batch", "messages": frames}), text=True)
                        else:
                            for frame in frames:
                                await ws.send(orjson.dumps(frame), text=True)
                    except websockets.ConnectionClosed:
                        pass  # the reader sees the close too; these count as in flight
                    i = due
                if i < expected:
                    await asyncio.sleep(pace.sleep_s(start, i, time.perf_counter()))
        if reader.done() and not reader.cancelled():
            reader.result()
    except TimeoutError:
        result.error("timed out waiting for publish replies", expected - result.replies)
    finally:
        if not result.send_seconds:
            result.sent, result.send_seconds = i, time.perf_counter() - start
        reader.cancel()
        await ws.close()


async def run_w2(
    http_base: str, topic: str, pace: W2Pace, batched: bool, on_start: CpuHook
) -> tuple[W2Result, dict[str, float]]:
    """Start the consumer process, wait until it is subscribed, then pace the producer.
    ``on_start(child_pid)`` starts CPU accounting and returns the function that stops it.
    The child prints READY, later one JSON line with its latencies, then waits for stdin to
    close, so its CPU can still be read from /proc when accounting stops."""
    expected, seconds = pace.expected, pace.seconds
    result = W2Result(expected)
    cmd = ["-m", "folio.bench_gateway_w2", "consume", "--http", http_base, "--topic", topic]
    cmd += ["--expected", str(expected), "--seconds", str(seconds + DRAIN_S)]
    if batched:
        cmd.append("--batch")
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = await asyncio.create_subprocess_exec(
        sys.executable, *cmd, stdin=PIPE, stdout=PIPE, env=env, limit=CHILD_LINE_MAX
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        line = await asyncio.wait_for(child.stdout.readline(), CHILD_START_S)
        if not line.startswith(READY.encode()):
            raise RuntimeError(f"W2 consumer did not start: {line!r}")
        await asyncio.sleep(SETTLE_S)
        stop_cpu = on_start(child.pid)
        link = Link(http_base, topic, lambda ws_base: producer_url(ws_base, topic))
        await produce_paced(link, pace, batched, result)
        line = await asyncio.wait_for(child.stdout.readline(), seconds + 2 * DRAIN_S)
        cpu = stop_cpu()
        data = orjson.loads(line)
        result.e2e_ms = [ns / 1e6 for ns in data["latencies_ns"]]
        result.received = len(result.e2e_ms)
        result.duplicates = int(data["duplicates"])
        result.reconnects += int(data["reconnects"])
        child.stdin.close()
        await asyncio.wait_for(child.wait(), DRAIN_S)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    return result, cpu


# ---------------------------------------------------------------- consumer (child process)


async def consume_latency(
    link: Link, expected: int, seconds: float, batched: bool
) -> tuple[list[int], int, int]:
    """Receive until ``expected`` distinct messages or ``seconds``; ack each;
    (latencies ns, duplicates, reconnects).
    If the topic moves (4503), connect again; what comes again counts as a duplicate."""
    latencies: list[int] = []
    seen: set[int] = set()  # sequence numbers (ids change if a message is published again)
    duplicates = 0
    moves = LoadResult()
    ws = await link.connect()
    print(READY, flush=True)
    try:
        async with asyncio.timeout(seconds):
            while len(seen) < expected:
                try:
                    frame = orjson.loads(await ws.recv(decode=False))
                    now = time.time_ns()
                    if batched and frame.get("type") == "messages":
                        messages = frame["messages"]
                        ids = [m["messageId"] for m in messages]
                        await ws.send(orjson.dumps({"type": "ack", "messageIds": ids}), text=True)
                    elif "messageId" in frame and "payload" in frame:
                        messages = [frame]
                        await ws.send(orjson.dumps({"messageId": frame["messageId"]}), text=True)
                    else:
                        continue
                except websockets.ConnectionClosed as exc:
                    ws = await link.reconnect(exc, moves, 0)
                    continue
                for message in messages:
                    stamp, seq = struct.unpack_from(">QQ", base64.b64decode(message["payload"]), 0)
                    if seq in seen:
                        duplicates += 1
                        continue
                    seen.add(seq)
                    latencies.append(now - stamp)
    except TimeoutError:
        pass
    finally:
        await ws.close()
    return latencies, duplicates, moves.reconnects


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m folio.bench_gateway_w2")
    sub = parser.add_subparsers(dest="command", required=True)
    consume = sub.add_parser("consume", help="W2 latency consumer (started by folio bench gateway)")
    consume.add_argument("--http", required=True, help="http://host:port of any gateway")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--sub", default="w2")
    consume.add_argument("--expected", type=int, required=True)
    consume.add_argument("--seconds", type=float, required=True)
    consume.add_argument("--batch", action="store_true", help="batched delivery and acks")
    args = parser.parse_args(argv)
    topic, sub, batch = args.topic, args.sub, args.batch
    link = Link(args.http, topic, lambda ws_base: consumer_url(ws_base, topic, sub, 256, batch))
    latencies, duplicates, moves = uvloop.run(consume_latency(link, args.expected, args.seconds, args.batch))
    line = {"latencies_ns": latencies, "duplicates": duplicates, "reconnects": moves}
    sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # the bench closes our stdin once it has read our CPU time
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
