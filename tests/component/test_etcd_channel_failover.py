"""A channel with several etcd endpoints moves on without ending its callers (real etcd).

The first endpoint completes the HTTP/2 handshake and never answers a request
(a member gone silent); the second is the session's real etcd. When one request on the silent
member times out, the channel moves to the next endpoint and closes the old
client; a second request still in flight on that client must see
``Unavailable`` - a caller retrying with patience, such as a gateway rejoining
after a lost lease, then tries again - and never a bare ``CancelledError``,
which would end the caller's task for good. The next request answers from the
real etcd. And a lease granted after such a move is kept alive through the
endpoint that granted it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from aetcd import rpc

from coordination.errors import Unavailable
from coordination.etcd_channel import EtcdChannel
from coordination.etcd_store import EtcdStore
from coordination.patience import Backoff, patiently
from coordination.session_thread import lease_session

pytestmark = pytest.mark.component

TIMEOUT_S = 2.0
LEASE_TTL_S = 2
EMPTY_SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # an HTTP/2 SETTINGS frame, no parameters


@pytest.fixture
async def silent_endpoint() -> AsyncIterator[tuple[str, int]]:
    """An HTTP/2 server that sends its SETTINGS and then never answers a request."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        writer.write(EMPTY_SETTINGS)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass  # requests heard, never answered

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield ("127.0.0.1", port)
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def parse(endpoint: str) -> tuple[str, int]:
    host, port = endpoint.rsplit(":", 1)
    return host, int(port)


async def test_requests_in_flight_on_a_closed_client_raise_unavailable(
    silent_endpoint: tuple[str, int], etcd_endpoint: str
) -> None:
    channel = EtcdChannel([silent_endpoint, parse(etcd_endpoint)], timeout_s=TIMEOUT_S)
    try:
        first = asyncio.create_task(channel.revision())  # times out first: moves on, closes the client
        await asyncio.sleep(TIMEOUT_S / 2)
        second = asyncio.create_task(channel.revision())  # in flight on that client when it is closed
        results = await asyncio.gather(first, second, return_exceptions=True)
        assert isinstance(results[0], Unavailable), results[0]
        assert isinstance(results[1], Unavailable), repr(results[1])
        assert channel.endpoint == etcd_endpoint
        assert await channel.revision() > 0  # the next endpoint answers
    finally:
        await channel.close()


async def test_a_cancelled_caller_is_still_cancelled(silent_endpoint: tuple[str, int]) -> None:
    """Only a call ended by its client's close is ``Unavailable``: cancelling the
    caller's own task still cancels it."""
    channel = EtcdChannel([silent_endpoint], timeout_s=TIMEOUT_S)
    try:
        call = asyncio.create_task(channel.call("kvstub", "Range", rpc.RangeRequest(key=b"k")))
        await asyncio.sleep(0.3)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        await channel.close()


async def test_lease_keepalives_go_to_the_endpoint_that_granted_the_lease(
    silent_endpoint: tuple[str, int], etcd_endpoint: str
) -> None:
    """The gateway's lease thread must not start on a silent first member while its
    store already moved to one that answers: one keepalive left unanswered there
    lasts until the lease's local deadline, and the lease is lost."""
    store = EtcdStore([silent_endpoint, parse(etcd_endpoint)], namespace="/lease-failover", timeout_s=1.0)
    session = lease_session(store, LEASE_TTL_S)
    try:
        await patiently("test", session.start, logging.getLogger(__name__), Backoff(0.05, 0.2))
        assert store.endpoint == etcd_endpoint
        await asyncio.sleep(LEASE_TTL_S * 1.5)  # several keepalive rounds, past one ttl
        assert not session.lost.is_set(), session.lost_reason
        assert session.is_valid()
    finally:
        await session.close()
        await store.close()
