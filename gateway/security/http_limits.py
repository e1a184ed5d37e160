"""Bounds on connections and a request's head, enforced in uvicorn's HTTP protocol (asyncio shell).

Owns: ``HeadLimits`` and ``protocol_class(limits)``, uvicorn's httptools
protocol with the bounds no ASGI layer can see, because they apply before a
request exists. Rules (docs/decisions/0009-security-model.md), each answered
with a JSON reason and ``Connection: close``, never a hang:
- at most ``connections`` open connections (HTTP and WebSocket; the cap
  ``file_budget.connection_cap`` leaves open files below the process's limit,
  so a connection is always accepted and answered rather than reset): a
  connection past the cap pushes out the oldest one still waiting for its
  request head (503 to that one; a legitimate request sends its head at once,
  a slow-header client does not), and when no connection is waiting for a
  head the new one is answered 503 and closed;
- a request line (method, URL, version) longer than ``line_bytes``: 414;
- a head (request line and headers) larger than ``head_bytes``: 431 (bytes
  are counted as they arrive, so a huge header is refused after at most one
  socket read beyond the bound, never buffered whole);
- more than ``header_count`` headers: 431;
- a head not complete ``head_timeout_s`` after the connection opened or the
  request began (slow headers, a handshake never finished): 408.
WebSocket handshakes are HTTP requests until their head is complete, so the
same bounds apply to them. Every refusal is counted in
``folio_gateway_head_refused_total{reason}``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httptools
import orjson
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# one per process (the protocol class outlives apps); each gateway registry shows it (``register``)
_PROCESS = CollectorRegistry()
REFUSED = Counter(
    "folio_gateway_head_refused", "Requests refused before their head was read", ["reason"], registry=_PROCESS
)
CONNECTIONS_LIMIT = Gauge(
    "folio_gateway_connections_limit", "Open connections the gateway holds at most", registry=_PROCESS
)
OPEN_FILES_LIMIT = Gauge(
    "folio_gateway_open_files_limit", "The gateway's open-file limit (soft RLIMIT_NOFILE)", registry=_PROCESS
)
CONNECTIONS = Gauge("folio_gateway_connections", "Open connections (HTTP and WebSocket)", registry=_PROCESS)


def register(registry: CollectorRegistry) -> None:
    """Show the head-refusal counter and the connection figures in ``registry`` (the gateway's /metrics)."""
    if registry is not REGISTRY:
        for metric in (REFUSED, CONNECTIONS_LIMIT, OPEN_FILES_LIMIT, CONNECTIONS):
            registry.register(metric)


LINGER_S = 1.0
LINGERING_MAX = 64  # connections refused at the connection limit lingering at once; past it closed at once
_REASONS = {
    408: "Request Timeout",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class HeadLimits:
    line_bytes: int = 8 * 1024
    head_bytes: int = 32 * 1024
    header_count: int = 100
    head_timeout_s: float = 10.0
    connections: int = 20_000  # open connections at once (file_budget.connection_cap)


def protocol_class(limits: HeadLimits) -> type[HttpToolsProtocol]:
    waiting: dict[HttpToolsProtocol, None] = {}  # connections in a request head, oldest first
    servers: list[set[Any]] = []
    lingering: set[HttpToolsProtocol] = set()  # refused at the connection limit, closing soon

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if not servers:  # the server's set of HTTP and WebSocket connections, counted on /metrics
                servers.append(self.connections)
                CONNECTIONS.set_function(lambda: len(servers[0]))
            self._head_bytes = 0
            self._line_bytes = 0
            self._header_bytes = 0
            self._headers_seen = 0
            self._in_head = True
            self._refused = False
            self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(
                limits.head_timeout_s, self._head_overdue
            )
            if len(self.connections) > limits.connections and not self._push_out_one_waiting():
                self._refuse(503, self._full(), "connection_limit", linger=len(lingering) < LINGERING_MAX)
                return
            waiting[self] = None

        def _full(self) -> str:
            return (
                f"the gateway holds its limit of {limits.connections} connections; "
                "retry later, or reuse a connection (keep-alive)"
            )

        def _push_out_one_waiting(self) -> bool:
            """Refuse the oldest connection still waiting for its request head."""
            for other in waiting:
                if other is not self and isinstance(other, BoundedHttpToolsProtocol) and not other._refused:
                    del waiting[other]
                    other._refuse(503, other._full(), "pushed_out", linger=False)
                    return True
            return False

        def connection_lost(self, exc: Exception | None) -> None:
            waiting.pop(self, None)
            self._stop_timer()
            super().connection_lost(exc)

        def _stop_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_overdue(self) -> None:
            self._head_timer = None
            if self._in_head and not self._refused:
                self._refuse(
                    408, f"request head not complete within {limits.head_timeout_s:g} s", "head_timeout"
                )

        def _refuse(self, status: int, reason: str, code: str, *, linger: bool = True) -> None:
            self._refused = True
            waiting.pop(self, None)
            self._stop_timer()
            REFUSED.labels(code).inc()
            body = orjson.dumps({"reason": reason, "code": code})
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n"
                + ("retry-after: 1\r\n" if status == 503 else "")
                + "\r\n"
            )
            transport = self.transport
            if not transport.is_closing():
                transport.write(head.encode() + body)
                # lingering close: end our side, discard what still arrives, close a moment
                # later, so the peer reads the answer instead of a reset (unread input at
                # close makes the kernel send RST)
                if not linger:  # at the connection limit: its file is needed now
                    transport.close()
                    return
                if transport.can_write_eof():
                    transport.write_eof()
                lingering.add(self)
                self.loop.call_later(LINGER_S, self._close_lingering)

        def _close_lingering(self) -> None:
            lingering.discard(self)
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            self._unset_keepalive_if_required()
            if self._in_head:
                self._head_bytes += len(data)
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                if not self._refused:
                    self.send_400_response("Invalid HTTP request received.")
                return
            except httptools.HttpParserUpgrade:
                if self._refused:
                    return
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
                return
            if self._in_head and not self._refused and self._head_bytes > limits.head_bytes:
                self._refuse(431, f"request head larger than {limits.head_bytes} bytes", "head_too_large")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head = True
            self._line_bytes = 0
            self._header_bytes = 0
            self._headers_seen = 0
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(limits.head_timeout_s, self._head_overdue)
            if not self._refused:
                waiting.setdefault(self, None)

        def on_url(self, url: bytes) -> None:
            self._line_bytes += len(url)
            if self._line_bytes > limits.line_bytes and not self._refused:
                self._refuse(414, f"request line longer than {limits.line_bytes} bytes", "line_too_long")
                return
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._headers_seen += 1
            self._header_bytes += len(name) + len(value) + 4
            if self._headers_seen > limits.header_count and not self._refused:
                self._refuse(431, f"more than {limits.header_count} headers", "too_many_headers")
                return
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            waiting.pop(self, None)
            self._in_head = False
            self._head_bytes = 0
            self._stop_timer()
            if self._refused:
                return
            if self._line_bytes + self._header_bytes > limits.head_bytes:  # it came in one read
                self._refuse(431, f"request head larger than {limits.head_bytes} bytes", "head_too_large")
                return
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if not self._refused:
                super().on_message_complete()

    return BoundedHttpToolsProtocol
