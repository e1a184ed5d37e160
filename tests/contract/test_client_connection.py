"""The client's node connection and pool, against a scripted fake node on loopback.

Covers: pipelining (one socket write per event-loop turn), the in-flight and
waiting bounds, failure of every pending request when the connection drops,
fast refusal during reconnect backoff, request timeouts, the pool bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from storage import wire
from storage.client.connection import ConnectionConfig, NodeConnection
from storage.client.pool import ConnectionPool
from storage.errors import NodeUnavailable, Status

pytestmark = pytest.mark.contract


class FakeNode:
    """Answers every request OK with its body echoed, unless ``hold`` is set."""

    def __init__(self) -> None:
        self.hold = False
        self.held: list[tuple[asyncio.StreamWriter, bytes]] = []
        self.received = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.address = ""

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = wire.FrameDecoder.requests()
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                for op, request_id, body in decoder.feed(data):
                    self.received += 1
                    reply = wire.encode_response(op, request_id, Status.OK, body)
                    if self.hold:
                        self.held.append((writer, reply))
                    else:
                        writer.write(reply)

    def release(self) -> None:
        for writer, reply in self.held:
            writer.write(reply)
        self.held.clear()
        self.hold = False

    def drop_connections(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        self.drop_connections()
        await self.server.wait_closed()


@pytest.fixture
async def node() -> AsyncIterator[FakeNode]:
    fake = FakeNode()
    await fake.start()
    yield fake
    await fake.stop()


class Replies:
    def __init__(self) -> None:
        self.got: dict[Any, tuple[Status, bytes]] = {}
        self.event = asyncio.Event()
        self.expected = 0

    def __call__(self, node: str, token: Any, status: Status, body: bytes) -> None:
        assert token not in self.got, "a request was answered twice"
        self.got[token] = (status, body)
        if len(self.got) >= self.expected:
            self.event.set()

    async def wait(self, count: int) -> None:
        self.expected = count
        if len(self.got) < count:
            self.event.clear()
            await asyncio.wait_for(self.event.wait(), 5)


async def test_pipelined_requests_are_coalesced_per_round(node: FakeNode) -> None:
    conn = NodeConnection(node.address)
    status, _ = await conn.request(wire.Op.NODE_INFO, b"")  # connect
    assert status is Status.OK
    assert conn._transport is not None
    writes = 0
    original = conn._transport.write

    def counting_write(data: Any) -> None:
        nonlocal writes
        writes += 1
        original(data)

    conn._transport.write = counting_write  # type: ignore[method-assign]
    replies = Replies()
    conn.send(wire.Op.READ, (0).to_bytes(4, "big"), replies, 0)
    assert writes == 1  # the round's first request is written at once, not a loop round later
    for i in range(1, 1000):
        conn.send(wire.Op.READ, i.to_bytes(4, "big"), replies, i)
    assert writes == 1
    await replies.wait(1000)
    assert writes == 2  # the other 999 of the round in one write at its end
    assert all(replies.got[i] == (Status.OK, i.to_bytes(4, "big")) for i in range(1000))
    await conn.close()


async def test_in_flight_and_waiting_bounds(node: FakeNode) -> None:
    conn = NodeConnection(node.address, ConnectionConfig(in_flight_max=10, waiting_max=5))
    await conn.request(wire.Op.NODE_INFO, b"")
    node.hold = True
    replies = Replies()
    for i in range(20):
        conn.send(wire.Op.READ, b"", replies, i)
    assert conn.in_flight == 10 and conn.waiting == 5
    await replies.wait(5)  # the 5 beyond both bounds are refused at once
    assert {t for t, (s, _) in replies.got.items() if s is Status.UNAVAILABLE} == set(range(15, 20))
    while node.received < 11:
        await asyncio.sleep(0.01)
    assert node.received == 11  # 1 + 10: the waiting ones were not written
    node.release()
    while len(replies.got) < 20:
        node.release()
        await asyncio.sleep(0.01)
    assert all(replies.got[i][0] is Status.OK for i in range(15))
    await conn.close()


async def test_connection_loss_fails_every_pending_request_then_backoff_then_reconnect(
    node: FakeNode,
) -> None:
    conn = NodeConnection(node.address, ConnectionConfig(backoff_initial_ms=200))
    await conn.request(wire.Op.NODE_INFO, b"")
    node.hold = True
    replies = Replies()
    for i in range(50):
        conn.send(wire.Op.READ, b"", replies, i)
    while node.received < 51:
        await asyncio.sleep(0.01)
    node.drop_connections()
    await replies.wait(50)
    assert all(s is Status.UNAVAILABLE for s, _ in replies.got.values())
    node.hold = False
    node.held.clear()
    status, _ = await conn.request(wire.Op.READ, b"", 1000)  # inside the backoff: refused fast
    assert status is Status.UNAVAILABLE
    await asyncio.sleep(0.25)
    status, _ = await conn.request(wire.Op.READ, b"x", 1000)
    assert status is Status.OK and conn.connects == 2
    await conn.close()


async def test_connect_refused_is_reported_as_unavailable() -> None:
    probe = FakeNode()
    await probe.start()
    address = probe.address
    await probe.stop()
    conn = NodeConnection(address)
    status, _ = await conn.request(wire.Op.READ, b"", 2000)
    assert status is Status.UNAVAILABLE
    await conn.close()


async def test_request_timeout_frees_the_slot(node: FakeNode) -> None:
    conn = NodeConnection(node.address, ConnectionConfig(in_flight_max=1))
    await conn.request(wire.Op.NODE_INFO, b"")
    node.hold = True
    status, _ = await conn.request(wire.Op.READ, b"", timeout_ms=50)
    assert status is Status.TIMEOUT and conn.in_flight == 0
    node.release()
    status, body = await conn.request(wire.Op.READ, b"after", timeout_ms=2000)
    assert (status, body) == (Status.OK, b"after")  # the late reply to the first was ignored
    await conn.close()


async def test_pool_bound_evicts_idle_connections_and_refuses_when_all_busy(node: FakeNode) -> None:
    pool = ConnectionPool(connections_max=2)
    a = pool.get(node.address)
    assert pool.get(node.address) is a
    b = pool.get("127.0.0.1:1")
    node.hold = True
    replies = Replies()
    a.send(wire.Op.READ, b"", replies, "a")
    b.send(wire.Op.READ, b"", replies, "b")
    with pytest.raises(NodeUnavailable):
        pool.get("127.0.0.1:2")  # both busy
    await replies.wait(1)  # b is refused (nothing listens on port 1)
    c = pool.get("127.0.0.1:3")  # b is idle now: evicted
    assert len(pool) == 2 and "127.0.0.1:1" not in pool and c is not b
    node.release()
    await pool.close()


async def test_bad_reply_frame_closes_the_connection() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"\x00\x00\x00\x01\x00")  # length 1: shorter than a reply head
        await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = NodeConnection(f"127.0.0.1:{port}")
    status, _ = await conn.request(wire.Op.READ, b"", 2000)
    assert status is Status.UNAVAILABLE
    await conn.close()
    server.close()
