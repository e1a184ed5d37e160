"""One pipelined TCP connection from the client to one storage node.

Owns: the socket to a node, request ids, the table of requests awaiting a
reply, write coalescing, reconnect with backoff, and the in-flight bound.
Rules (docs/architecture.md §3 "Wire protocol"): many requests in flight per connection;
the first request of an event-loop round is written at once (no loop round
of latency), the rest of that round in one batch at its end (no drain per
request); small requests are joined into one buffer (one copy costs less than
an iovec each), large bodies go out vectored (not copied);
at most ``in_flight_max`` requests on the wire and ``waiting_max`` queued
behind them, anything more is refused at once with UNAVAILABLE; every request
gets exactly one reply callback: the node's, or UNAVAILABLE when the
connection is lost / cannot be made. After a failed connect, requests are
refused for a backoff interval (doubling up to ``backoff_max_ms``), so a dead
node is reported fast and the writer can replace it.
Reply callbacks run on the event loop, never inside ``send``.
The connection is made through the ``Network`` port and backoff is timed by
the ``Clock`` port (storage/ports.py; asyncio and the monotonic clock in
production, the simulation's in tests/sim).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordination.clock import Clock, SystemClock, wall_ms
from storage import wire, wire_auth
from storage.errors import ProtocolViolation, Status
from storage.ports import ASYNCIO_NETWORK, Network
from storage.types import NodeId

log = logging.getLogger(__name__)

ReplyCallback = Callable[[NodeId, Any, Status, bytes], None]  # (node, token, status, body)


SECRET_ENV = "FOLIO_CLUSTER_SECRET_FILE"
# where ``folio up`` keeps the cluster secret by default (relative to where it was started)
LOCAL_SECRET = Path(".folio") / "security" / "cluster.key"


def secret_from_env() -> bytes | None:
    """The cluster secret in the file named by FOLIO_CLUSTER_SECRET_FILE; without it, that
    of a ``folio up`` started in the current directory with its default data root, if any
    (a node without a secret skips the proof: docs/decisions/0017-open-mode-cluster-secret.md)."""
    path = os.environ.get(SECRET_ENV)
    if path:
        return Path(path).read_bytes()
    try:
        return LOCAL_SECRET.read_bytes()
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class ConnectionConfig:
    in_flight_max: int = 16_384  # requests written and not yet answered
    waiting_max: int = 65_536  # requests queued behind the in-flight bound or a connect
    connect_timeout_ms: int = 2_000
    backoff_initial_ms: int = 50
    backoff_max_ms: int = 2_000
    request_timeout_ms: int = 10_000  # default for ``request``
    # the cluster secret: prove it to the node (storage/wire_auth.py); by default the file
    # named by FOLIO_CLUSTER_SECRET_FILE, so tools and Spark jobs started with it work too
    auth_secret: bytes | None = field(default_factory=secret_from_env)


_encode_request_head = wire.encode_request_head
JOIN_BYTES_MAX = 4096  # a body up to this size is joined with its head; larger ones go vectored
_STATUS = {int(status): status for status in Status}


class _Protocol(asyncio.Protocol):
    """Hands the node's replies, split by ``wire.FrameDecoder``, to its connection."""

    def __init__(self, owner: NodeConnection) -> None:
        self.owner = owner
        self._replies = wire.FrameDecoder.responses()

    def data_received(self, data: bytes) -> None:
        try:
            replies = self._replies.feed(data)
        except ProtocolViolation as exc:
            self.owner._abort(f"reply {exc}")
            return
        if replies:
            self.owner._on_replies(replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._on_lost(self, exc)

    def pause_writing(self) -> None:
        self.owner._paused = True

    def resume_writing(self) -> None:
        self.owner._paused = False
        self.owner._schedule_flush()


class NodeConnection:
    def __init__(
        self,
        node_id: NodeId,
        config: ConnectionConfig | None = None,
        clock: Clock | None = None,
        network: Network = ASYNCIO_NETWORK,
    ) -> None:
        self.node_id = node_id
        self.config = config or ConnectionConfig()
        self._clock: Clock = clock or SystemClock()
        self._network = network
        self._in_flight_max = self.config.in_flight_max
        host, _, port = node_id.rpartition(":")
        self._host, self._port = host, int(port)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._in_flight: dict[int, tuple[ReplyCallback, Any]] = {}
        self._waiting: deque[tuple[int, int, bytes, ReplyCallback, Any]] = deque()
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._paused = False
        self._next_id = 1
        self._retry_at_ms = 0
        self._backoff_ms = self.config.backoff_initial_ms
        self._closed = False
        self.connects = 0

    # ------------------------------------------------------------ queries

    @property
    def connected(self) -> bool:
        return self._transport is not None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def idle(self) -> bool:
        return not self._in_flight and not self._waiting

    # ------------------------------------------------------------ sending

    def send(self, op: int, body: bytes, callback: ReplyCallback, token: Any) -> int:
        """Queue one request; ``callback(node, token, status, body)`` runs later,
        exactly once. Returns the request id."""
        rid = self._next_id
        self._next_id = rid + 1
        in_flight = self._in_flight
        if self._transport is not None and len(in_flight) < self._in_flight_max and not self._waiting:
            in_flight[rid] = (callback, token)
            head = _encode_request_head(op, rid, len(body))
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)
                if not self._paused:  # the round's first request goes out at once
                    if len(body) <= JOIN_BYTES_MAX:
                        self._transport.write(head + body)
                    else:
                        self._transport.writelines((head, body))  # vectored: the body is not copied
                    return rid
            out = self._out
            out.append(head)
            out.append(body)
            self._out_bytes += len(body)
            return rid
        if self._closed or len(self._waiting) >= self.config.waiting_max:
            self._refuse(callback, token)
            return rid
        if self._transport is None and self._connecting is None:
            if self._clock.now_ms() < self._retry_at_ms:
                self._refuse(callback, token)  # in backoff after a failure: fail fast
                return rid
            self._connecting = self._loop.create_task(self._connect())
        self._waiting.append((rid, op, body, callback, token))
        return rid

    async def request(self, op: int, body: bytes, timeout_ms: int | None = None) -> tuple[Status, bytes]:
        """One request/reply; a timeout is reported as (TIMEOUT, b"")."""
        future: asyncio.Future[tuple[Status, bytes]] = self._loop.create_future()
        rid = self.send(op, body, _resolve, future)
        timeout = (timeout_ms if timeout_ms is not None else self.config.request_timeout_ms) / 1000
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            self._forget(rid)
            return Status.TIMEOUT, b""

    def _refuse(self, callback: ReplyCallback, token: Any) -> None:
        self._loop.call_soon(callback, self.node_id, token, Status.UNAVAILABLE, b"")

    def _forget(self, rid: int) -> None:
        if self._in_flight.pop(rid, None) is not None:
            self._admit_waiting()
            return
        for i, item in enumerate(self._waiting):
            if item[0] == rid:
                del self._waiting[i]
                return

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._out:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._paused or self._transport is None or not self._out:
            return
        out = self._out
        if self._out_bytes <= JOIN_BYTES_MAX * (len(out) >> 1):  # small bodies on average: one buffer
            self._transport.write(b"".join(out))
        else:
            self._transport.writelines(out)  # vectored: large bodies are not copied
        out.clear()
        self._out_bytes = 0

    def _admit_waiting(self) -> None:
        if self._transport is None:
            return
        limit = self.config.in_flight_max
        while self._waiting and len(self._in_flight) < limit:
            rid, op, body, callback, token = self._waiting.popleft()
            self._in_flight[rid] = (callback, token)
            self._out.append(_encode_request_head(op, rid, len(body)))
            self._out.append(body)
            self._out_bytes += len(body)
        self._schedule_flush()

    # ------------------------------------------------------------ receiving

    def _on_replies(self, replies: list[wire.Response]) -> None:
        node = self.node_id
        in_flight = self._in_flight
        statuses = _STATUS
        for (_, request_id, code), body in replies:
            status = statuses.get(code)
            if status is None:
                self._abort(f"unknown status {code} in a reply")
                return
            entry = in_flight.pop(request_id, None)
            if entry is None:
                continue  # timed out and forgotten
            callback, token = entry
            callback(node, token, status, body)
        if self._waiting:
            self._admit_waiting()

    # ------------------------------------------------------------ connecting

    async def _connect(self) -> None:
        try:
            transport, protocol = await asyncio.wait_for(
                self._network.connect(self._host, self._port, lambda: _Protocol(self)),
                self.config.connect_timeout_ms / 1000,
            )
        except (OSError, TimeoutError) as exc:
            self._connecting = None
            self._note_failure(f"connect failed: {exc!r}")
            self._fail_all()
            return
        self._connecting = None
        if self._closed:
            transport.close()
            self._fail_all()
            return
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance here
        self._transport, self._protocol = transport, protocol  # type: ignore[assignment]
        self._paused = False
        self._backoff_ms = self.config.backoff_initial_ms
        self.connects += 1
        if self.config.auth_secret is not None:  # the first bytes: the proof, then frames
            transport.write(wire_auth.proof(self.config.auth_secret, wall_ms()))
        self._admit_waiting()

    def _note_failure(self, why: str) -> None:
        log.info("node %s: %s; retry in %d ms", self.node_id, why, self._backoff_ms)
        self._retry_at_ms = self._clock.now_ms() + self._backoff_ms
        self._backoff_ms = min(self._backoff_ms * 2, self.config.backoff_max_ms)

    def _on_lost(self, protocol: _Protocol, exc: Exception | None) -> None:
        if protocol is not self._protocol:
            return
        self._transport = None
        self._protocol = None
        self._out.clear()
        self._out_bytes = 0
        if not self._closed:
            self._note_failure(f"connection lost ({exc!r})")
        self._fail_all()

    def _abort(self, why: str) -> None:
        log.warning("node %s: %s; closing the connection", self.node_id, why)
        if self._transport is not None:
            self._transport.abort()

    def _fail_all(self) -> None:
        failed = list(self._in_flight.values()) + [(w[3], w[4]) for w in self._waiting]
        self._in_flight.clear()
        self._waiting.clear()
        for callback, token in failed:
            callback(self.node_id, token, Status.UNAVAILABLE, b"")

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
            self._connecting = None
        if self._transport is not None:
            self._flush()
            self._transport.close()
            self._transport = None
            self._protocol = None
        self._fail_all()


def _resolve(node: NodeId, future: asyncio.Future[tuple[Status, bytes]], status: Status, body: bytes) -> None:
    if not future.done():
        future.set_result((status, body))
