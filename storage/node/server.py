"""The node's TCP server: storage/wire.py frames in, NodeService calls, replies out.

Owns: client connections, per-connection pipelining and flow control. It
listens through the ``Network`` port (storage/ports.py: asyncio's server in
production, the simulated network in tests/sim).
Rules:
- many requests in flight per connection; replies go out as they complete:
  a loop round's first reply at once, the rest of the round batched into one
  socket write at its end;
- with a cluster secret, a connection's first bytes must be a valid proof
  (storage/wire_auth.py) within ``AUTH_TIMEOUT_S``, else it is closed before
  any request is read; at most ``max_per_peer`` connections from one address;
  a connection idle (no request in flight, nothing received) for
  ``idle_timeout_s`` is closed (clients reconnect on their next request);
- bounds: ``max_connections`` (more are closed at once), ``max_in_flight``
  requests per connection (the socket is not read while the bound is hit, or
  while the peer does not read our replies);
- bad input: a frame length out of bounds closes that connection; a
  malformed body, a wrong entry checksum -> BAD_REQUEST; an unknown op ->
  UNKNOWN_OP; either way nothing is stored and other clients are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from coordination.clock import wall_ms
from storage import wire, wire_auth
from storage.errors import ProtocolViolation, Status
from storage.node.journal_io import Buffer
from storage.node.reads import dispatch_read
from storage.node.service import NodeService
from storage.ports import ASYNCIO_NETWORK, Listener, Network

log = logging.getLogger("folio.storage.server")

MAX_CONNECTIONS = 1024
MAX_IN_FLIGHT = 4096  # requests per connection
MAX_PER_PEER = 256  # connections from one address
IDLE_TIMEOUT_S = 300.0
AUTH_TIMEOUT_S = 5.0
_encode_response = wire.encode_response

_ADD = int(wire.Op.ADD)
_READ = int(wire.Op.READ)
_RANGE = int(wire.Op.READ_RANGE)
_LAC = int(wire.Op.READ_LAC)
_FENCE = int(wire.Op.FENCE)
_INFO = int(wire.Op.NODE_INFO)


class Connection(asyncio.Protocol):
    def __init__(self, server: NodeServer) -> None:
        self._server = server
        self._service = server.service
        self._buffer = bytearray()  # an incomplete proof carried over to the next read
        self._requests = wire.FrameDecoder.requests()
        self._transport: asyncio.Transport | None = None
        self._backlog: deque[wire.Request] = deque()
        self._out: list[Buffer] = []
        self._flush_scheduled = False
        self._reading_paused = False
        self._write_paused = False
        self.in_flight = 0
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self.authed = False  # a node without a secret still skips a proof a client sends
        self.last_active = self._loop.time()
        self.peer_host = ""

    # ------------------------------------------------------------ transport events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        peer = transport.get_extra_info("peername")
        self.peer_host = str(peer[0]) if peer else ""
        if not self._server.admit(self):
            self.closed = True
            transport.close()
            return
        if self._server.checker is not None:
            self._loop.call_later(AUTH_TIMEOUT_S, self._auth_overdue)

    def _auth_overdue(self) -> None:
        if not self.authed and not self.closed:
            log.warning(
                "closing connection %s: no authentication within %.0f s", self._peer(), AUTH_TIMEOUT_S
            )
            self._server.service.metrics.auth_refused.inc()
            self._abort()

    def _authenticate(self, data: bytes) -> bytes | None:
        """The bytes after a valid proof, or None (waiting for more, or closed)."""
        buffer = self._buffer
        buffer += data
        checker = self._server.checker
        if checker is None:  # no secret here: skip a proof if one comes (a client may send one)
            magic = wire.PROOF_MAGIC
            if bytes(buffer[: len(magic)]) != magic[: len(buffer)]:
                rest = bytes(buffer)
                buffer.clear()
                self.authed = True
                return rest
            if len(buffer) < wire.PROOF_BYTES:
                return None
            rest = bytes(buffer[wire.PROOF_BYTES :])
            buffer.clear()
            self.authed = True
            return rest
        if len(buffer) < wire.PROOF_BYTES:
            return None
        head, rest = bytes(buffer[: wire.PROOF_BYTES]), bytes(buffer[wire.PROOF_BYTES :])
        buffer.clear()
        if not checker.check(head, wall_ms()):
            log.warning("closing connection %s: authentication failed", self._peer())
            self._server.service.metrics.auth_refused.inc()
            self._abort()
            return None
        self.authed = True
        return rest

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._server.release(self)
        self._service.waiters.drop_connection(self)

    def data_received(self, data: bytes) -> None:
        self.last_active = self._loop.time()
        if not self.authed:
            after = self._authenticate(data)
            if not after:
                return
            data = after
        try:
            frames = self._requests.feed(data)
        except ProtocolViolation as exc:
            log.warning("closing connection %s: %s", self._peer(), exc)
            self._abort()
            return
        if frames:
            if self._backlog:
                self._backlog.extend(frames)
                self._process()
            else:
                limit = self._server.max_in_flight
                dispatch = self._dispatch
                for i, frame in enumerate(frames):
                    if self.in_flight >= limit or self.closed:
                        self._backlog.extend(frames[i:])
                        break
                    self.in_flight += 1
                    dispatch(frame)
                self._update_reading()
        self._flush()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # ------------------------------------------------------------ requests

    def _process(self) -> None:
        backlog = self._backlog
        limit = self._server.max_in_flight
        while backlog and self.in_flight < limit and not self.closed:
            frame = backlog.popleft()
            self.in_flight += 1
            self._dispatch(frame)
        self._update_reading()

    def _dispatch(self, frame: wire.Request) -> None:
        (op, request_id), body = frame
        service = self._service
        if op == _ADD:
            service.add(self, request_id, memoryview(body))
        elif op in (_READ, _RANGE, _LAC):
            dispatch_read(service, self, op, request_id, body)
        elif op == _FENCE:
            try:
                ledger_id = wire.parse_ledger(body)
            except ProtocolViolation:
                self.reply(op, request_id, Status.BAD_REQUEST)
                return
            service.fence(self, request_id, ledger_id)
        elif op == _INFO:
            self.reply(op, request_id, Status.OK, self._server.node_info())
        else:
            self.reply(op, request_id, Status.UNKNOWN_OP)

    def reply(self, op: int, request_id: int, status: Status, body: Buffer = b"") -> None:
        if self.closed:
            return
        self.in_flight -= 1
        frame = _encode_response(op, request_id, status, body)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
            if self._transport is not None and not self._write_paused:
                self._transport.write(frame)  # the round's first reply goes out at once
                return
        self._out.append(frame)

    def _flush(self) -> None:
        """Write every reply gathered this round in one go; then take more requests."""
        self._flush_scheduled = False
        if self.closed or self._transport is None:
            return
        if self._out:
            out, self._out = self._out, []
            self._transport.write(b"".join(out))
        if self._backlog and self.in_flight < self._server.max_in_flight:
            self._process()
            if self._out and not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)
        else:
            self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self.closed:
            return
        want_pause = bool(self._backlog) or self.in_flight >= self._server.max_in_flight or self._write_paused
        if want_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not want_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _abort(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    def _peer(self) -> str:
        peer = self._transport.get_extra_info("peername") if self._transport else None
        return f"{peer[0]}:{peer[1]}" if peer else "?"

    def stop_reading(self) -> None:
        if self._transport is not None and not self.closed and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self._flush()
            self._transport.close()


class NodeServer:
    def __init__(
        self,
        service: NodeService,
        node_info: Callable[[], bytes],
        max_connections: int = MAX_CONNECTIONS,
        max_in_flight: int = MAX_IN_FLIGHT,
        *,
        auth_secret: bytes | None = None,
        max_per_peer: int = MAX_PER_PEER,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        network: Network = ASYNCIO_NETWORK,
    ) -> None:
        self.service = service
        self._network = network
        self._node_info = node_info
        self.max_connections = max_connections
        self.max_in_flight = max_in_flight
        self.checker = wire_auth.ProofChecker(auth_secret) if auth_secret else None
        self.max_per_peer = max_per_peer
        self.idle_timeout_s = idle_timeout_s
        self.connections: set[Connection] = set()
        self._per_peer: dict[str, int] = {}
        self._server: Listener | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def node_info(self) -> bytes:
        return self._node_info()

    def admit(self, conn: Connection) -> bool:
        if len(self.connections) >= self.max_connections:
            log.warning("connection refused: %d connections open (max)", self.max_connections)
            return False
        if self._per_peer.get(conn.peer_host, 0) >= self.max_per_peer:
            log.warning(
                "connection from %s refused: %d open from there (max)", conn.peer_host, self.max_per_peer
            )
            return False
        self.connections.add(conn)
        self._per_peer[conn.peer_host] = self._per_peer.get(conn.peer_host, 0) + 1
        self.service.metrics.connections.set(len(self.connections))
        return True

    def release(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            left = self._per_peer.get(conn.peer_host, 1) - 1
            if left > 0:
                self._per_peer[conn.peer_host] = left
            else:
                self._per_peer.pop(conn.peer_host, None)
        self.service.metrics.connections.set(len(self.connections))

    async def _sweep_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(0.05, min(self.idle_timeout_s / 4, 5.0)))
            cutoff = loop.time() - self.idle_timeout_s
            for conn in list(self.connections):
                if conn.in_flight == 0 and conn.last_active < cutoff and not conn.closed:
                    self.service.metrics.idle_closed.inc()
                    conn.close()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server, address = await self._network.listen(host, port, lambda: Connection(self), 1024)
        if self.idle_timeout_s > 0:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_idle(), name="node-idle-sweep")
        return address

    def stop_listening(self) -> None:
        """No new connections, and no new requests on open ones (replies still go out)."""
        if self._server is not None:
            self._server.close()
        self.max_in_flight = 0  # connections take no more requests; replies still flush
        for conn in self.connections:
            conn.stop_reading()

    async def close_connections(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
