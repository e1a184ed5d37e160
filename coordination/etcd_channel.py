"""The connection to etcd that ``EtcdStore`` and its ``EtcdWatch``es share.

Owns: the aetcd client (the gRPC channel) and which endpoint it talks to, the
key namespace, the translation of gRPC/connection failures into the
coordination error tree, and the background tasks started on the client's behalf.
Rule: after an ``Unavailable`` the channel moves to the next endpoint (only with
several endpoints) and closes the failed client in the background, so the watches
on it re-subscribe on the new one; the other requests in flight on it, which
gRPC ends with a bare ``CancelledError``, raise ``Unavailable`` instead (a caller
that retries with patience must not see its own task end). Nothing here retries a
request: the store's caller sees ``Unavailable`` and decides. Once closed, every request raises
``Unavailable``. This is the leaf both the store and the watch depend on; neither
reaches into the other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any

import aetcd
import aetcd.exceptions
import aetcd.utils
from aetcd import rpc

from coordination.errors import Compacted, CoordinationError, LeaseLost, Unavailable

DEFAULT_TIMEOUT_S = 5.0  # per request
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

# what aetcd/gRPC raise; translated with map_error
CLIENT_ERRORS = (aetcd.exceptions.ClientError, rpc.BaseError, rpc.RpcError, asyncio.TimeoutError)

_CHANNEL_OPTIONS: dict[str, Any] = {
    "grpc.keepalive_time_ms": 10_000,  # detect a silently dead etcd on idle watch streams
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1_000,
    "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
}

_UNAVAILABLE_CODES = (rpc.StatusCode.UNAVAILABLE, rpc.StatusCode.DEADLINE_EXCEEDED, rpc.StatusCode.CANCELLED)
_UNAVAILABLE_TYPES = (
    aetcd.exceptions.ConnectionFailedError,
    aetcd.exceptions.ConnectionTimeoutError,
    aetcd.exceptions.WatchTimeoutError,
    asyncio.TimeoutError,
)


def map_error(exc: BaseException) -> CoordinationError:
    """Translate an aetcd/gRPC failure into the coordination error tree."""
    if isinstance(exc, CoordinationError):
        return exc
    if isinstance(exc, aetcd.exceptions.RevisionCompactedError):
        return Compacted(int(exc.compacted_revision))
    code = None
    text = str(exc) or type(exc).__name__
    for candidate in (exc, exc.__cause__):
        if isinstance(candidate, rpc.AioRpcError):
            code = candidate.code()
            text = candidate.details() or text
            break
    if "lease not found" in text:
        return LeaseLost(text)
    if "compacted" in text:
        return Compacted(0, text)
    if isinstance(exc, _UNAVAILABLE_TYPES) or code in _UNAVAILABLE_CODES or "closed" in text.lower():
        return Unavailable(f"etcd unavailable: {text}")
    return CoordinationError(f"etcd error: {text}")


class EtcdChannel:
    """The aetcd client on one of ``endpoints``, with keys under ``namespace``."""

    def __init__(
        self, endpoints: list[tuple[str, int]], *, namespace: str = "", timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = list(endpoints)
        self.namespace = namespace
        self.timeout_s = timeout_s
        self._index = 0
        self._client: Any = None
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def endpoint(self) -> str:
        host, port = self.endpoints[self._index]
        return f"{host}:{port}"

    async def connected(self) -> Any:
        """The aetcd client, connecting to the current endpoint first if needed."""
        if self._closed:
            raise Unavailable("etcd store closed")
        if self._client is None:
            host, port = self.endpoints[self._index]
            client = aetcd.Client(host=host, port=port, timeout=self.timeout_s, options=_CHANNEL_OPTIONS)
            with self.translate(client):
                await client.connect()
            self._client = client
        return self._client

    @contextlib.contextmanager
    def translate(self, client: Any) -> Iterator[None]:
        """Raise what ``client`` raises inside as a ``CoordinationError`` (``map_error``)."""
        try:
            yield
        except CLIENT_ERRORS as exc:
            error = map_error(exc)
            if isinstance(error, Unavailable):
                self._move_on(client)
            raise error from exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # this task was cancelled: not etcd's doing
            # gRPC ends the calls in flight on a client that is closed (after a move
            # to the next endpoint, or ``close()``) with a bare CancelledError: for
            # the caller that is etcd unavailable, never the end of its own task
            raise Unavailable("etcd unavailable: its connection was closed during the request") from None

    def _move_on(self, failed_client: Any) -> None:
        """After an Unavailable, use the next endpoint (only with several endpoints)."""
        if len(self.endpoints) > 1 and failed_client is self._client and failed_client is not None:
            self._index = (self._index + 1) % len(self.endpoints)
            self._client = None
            self.spawn(failed_client.close())  # its watches re-subscribe on the new client

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background; ``close()`` waits for it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def key(self, key: str) -> bytes:
        if not key:
            raise ValueError("empty key")
        return (self.namespace + key).encode()

    def key_range(self, prefix: str) -> tuple[bytes, bytes]:
        """etcd's ``[start, end)`` for every key under ``prefix`` in the namespace."""
        full = (self.namespace + prefix).encode()
        if not full:
            return b"\0", b"\0"  # every key
        return full, aetcd.utils.prefix_range_end(full)

    def strip(self, key: bytes) -> str:
        """An etcd key as the store's caller names it (namespace removed)."""
        return key.decode()[len(self.namespace) :]

    async def call(self, stub_name: str, method: str, request: Any) -> Any:
        """One unary gRPC request, translated; never retried."""
        client = await self.connected()
        with self.translate(client):
            stub = getattr(client, stub_name)
            return await getattr(stub, method)(request, timeout=self.timeout_s, metadata=client.metadata)

    async def revision(self) -> int:
        """The cluster's current revision."""
        resp = await self.call("kvstub", "Range", rpc.RangeRequest(key=b"\0", count_only=True))
        return int(resp.header.revision)

    async def close(self) -> None:
        """Refuse further requests, close the client and wait for the background tasks."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(*CLIENT_ERRORS):
                await client.close()
        for task in list(self._tasks):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
