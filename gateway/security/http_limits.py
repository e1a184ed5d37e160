"""Bounds on a request's head, enforced in uvicorn's HTTP protocol (asyncio shell).

Owns: ``HeadLimits`` and ``protocol_class(limits)``, uvicorn's httptools
protocol with the bounds no ASGI layer can see, because they apply before a
request exists. Rules (docs/decisions/0009-security-model.md), each answered
with a JSON reason and ``Connection: close``, never a hang:
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
from prometheus_client import REGISTRY, CollectorRegistry, Counter
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# one per process (the protocol class outlives apps); each gateway registry shows it (``register``)
_PROCESS = CollectorRegistry()
REFUSED = Counter(
    "folio_gateway_head_refused", "Requests refused before their head was read", ["reason"], registry=_PROCESS
)


def register(registry: CollectorRegistry) -> None:
    """Show the head-refusal counter in ``registry`` (the gateway's /metrics)."""
    if registry is not REGISTRY:
        registry.register(REFUSED)


LINGER_S = 1.0
_REASONS = {408: "Request Timeout", 414: "URI Too Long", 431: "Request Header Fields Too Large"}


@dataclass(frozen=True, slots=True)
class HeadLimits:
    line_bytes: int = 8 * 1024
    head_bytes: int = 32 * 1024
    header_count: int = 100
    head_timeout_s: float = 10.0


def protocol_class(limits: HeadLimits) -> type[HttpToolsProtocol]:
    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._head_bytes = 0
            self._line_bytes = 0
            self._header_bytes = 0
            self._headers_seen = 0
            self._in_head = True
            self._refused = False
            self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(
                limits.head_timeout_s, self._head_overdue
            )

        def connection_lost(self, exc: Exception | None) -> None:
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

        def _refuse(self, status: int, reason: str, code: str) -> None:
            self._refused = True
            self._stop_timer()
            REFUSED.labels(code).inc()
            body = orjson.dumps({"reason": reason, "code": code})
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            )
            transport = self.transport
            if not transport.is_closing():
                transport.write(head.encode() + body)
                # lingering close: end our side, discard what still arrives, close a moment
                # later, so the peer reads the answer instead of a reset (unread input at
                # close makes the kernel send RST)
                if transport.can_write_eof():
                    transport.write_eof()
                self.loop.call_later(LINGER_S, transport.close)

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
