"""WebSocket consumers that never read, opened cheaply: raw sockets with a tiny receive buffer.

Owns: opening a WebSocket connection by hand (one HTTP/1.1 upgrade request on
a plain socket whose ``SO_RCVBUF`` is set before it connects) and, at the end,
reading what the server sent up to its close frame. Rule: between the two the
client reads nothing, so the kernel takes only a few KiB per connection and
whatever the gateway sends beyond that stays in the gateway - the honest
pressure of a consumer that is stuck, which a client library (reading into
its own queue, with the kernel's default multi-MiB buffers) hides. A
thousand of these cost one process a few MiB.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import struct
from urllib.parse import urlsplit

RCVBUF = 4096  # the kernel doubles it; Linux keeps a floor of ~2 KiB
DRAIN_RCVBUF = 1 << 20  # once it reads at the end
HEAD_MAX = 16 * 1024
RESET = 1006  # what a client library reports for a connection closed without a close frame


class StuckSocket:
    """An open WebSocket that reads nothing until ``close_code``."""

    def __init__(self, sock: socket.socket, head_rest: bytes) -> None:
        self.sock = sock
        self._rest = head_rest  # bytes read past the handshake's response

    @classmethod
    async def open(cls, url: str, rcvbuf: int = RCVBUF, timeout_s: float = 30.0) -> StuckSocket:
        """Connect to ``ws://host:port/path?query`` and complete the handshake (101)."""
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(timeout_s):
                await loop.sock_connect(sock, (host, port))
                key = base64.b64encode(os.urandom(16)).decode()
                target = parts.path + (f"?{parts.query}" if parts.query else "")
                request = (
                    f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                    f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                )
                await loop.sock_sendall(sock, request.encode())
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = await loop.sock_recv(sock, 1024)
                    if not chunk or len(head) > HEAD_MAX:
                        raise ConnectionError(f"handshake with {url} failed: {head[:200]!r}")
                    head += chunk
        except BaseException:
            sock.close()
            raise
        status, _, rest = head.partition(b"\r\n\r\n")
        if not status.startswith(b"HTTP/1.1 101"):
            sock.close()
            raise ConnectionError(f"handshake with {url} refused: {status.splitlines()[0]!r}")
        return cls(sock, rest)

    async def close_code(self, wait_s: float) -> int | None:
        """Read (and drop) everything sent until the server's close frame: its code
        (``RESET``: the connection ended without one; None: still open after ``wait_s``)."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):  # it reads now: a window the sender need not probe
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, DRAIN_RCVBUF)
        buf = bytearray(self._rest)
        self._rest = b""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                while True:
                    code = _close_in(buf)
                    if code is not None:
                        return code
                    try:
                        chunk = await loop.sock_recv(self.sock, 256 * 1024)
                    except OSError:
                        return RESET
                    if not chunk:
                        return RESET
                    buf += chunk
        return None

    def abort(self) -> None:
        """Drop the connection (RST), without a close handshake."""
        with contextlib.suppress(OSError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def _close_in(buf: bytearray) -> int | None:
    """Drop whole frames from the front of ``buf`` (server frames: unmasked); the code of a
    close frame among them (1005 when it has none), else None."""
    while len(buf) >= 2:
        opcode, length, at = buf[0] & 0x0F, buf[1] & 0x7F, 2
        if length == 126:
            if len(buf) < 4:
                return None
            length, at = int.from_bytes(buf[2:4], "big"), 4
        elif length == 127:
            if len(buf) < 10:
                return None
            length, at = int.from_bytes(buf[2:10], "big"), 10
        if len(buf) < at + length:
            return None
        if opcode == 0x8:
            return int.from_bytes(buf[at : at + 2], "big") if length >= 2 else 1005
        del buf[: at + length]
    return None
