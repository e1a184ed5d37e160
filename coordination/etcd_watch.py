"""The etcd side of a watch: one server-side etcd watch feeding a ``WatchStream``.

Owns: subscribing (via aetcd's multiplexed ``Watcher``), translating etcd events,
and re-subscribing after the gRPC stream breaks.
Rule: the consumer's task does the (re)subscribing, lazily, when it finds the
queue empty; the stream callback only queues events or flags a break. A
re-subscription starts at the revision after the last event queued, so a
reconnect neither loses nor repeats events; it is retried with back-off for
``reconnect_s``, then the watch ends with ``Unavailable``. Callbacks from an
older subscription are ignored (generation counter). The watch depends on the
``EtcdChannel`` it shares with the store, never on the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

import aetcd.exceptions

from coordination.errors import Compacted, Unavailable
from coordination.etcd_channel import CLIENT_ERRORS, EtcdChannel
from coordination.store import EventKind, WatchEvent
from coordination.watch_stream import WatchStream

RECONNECT_BACKOFF_S = (0.05, 1.0)  # first and largest pause between watch re-subscriptions


class EtcdWatch(WatchStream):
    """A server-side etcd watch feeding a ``WatchStream``; re-subscribes when broken."""

    def __init__(
        self, channel: EtcdChannel, prefix: str, start_revision: int, *, queue_size: int, reconnect_s: float
    ) -> None:
        super().__init__(queue_size, on_close=self._cancel)
        self._channel = channel
        self._reconnect_s = reconnect_s
        self._prefix = prefix
        self._next_revision = start_revision  # 0 until known (then: after the last queued event)
        self._generation = 0  # callbacks from an older subscription are ignored
        self._subscribed = False
        self._watcher: Any = None
        self._watch_id: int | None = None

    async def _before_wait(self) -> None:
        if self._subscribed:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._reconnect_s
        delay, max_delay = RECONNECT_BACKOFF_S
        while self.active:
            try:
                if self._next_revision == 0:
                    self._next_revision = await self._channel.revision() + 1
                await self._subscribe()
                return
            except Compacted as exc:
                self.fail(exc)
            except Unavailable as exc:
                if self._channel.closed:
                    self.finish()
                elif loop.time() >= deadline:
                    self.fail(exc)
                else:
                    await asyncio.sleep(delay)  # back-off between reconnect attempts
                    delay = min(delay * 2, max_delay)

    async def _subscribe(self) -> None:
        client = await self._channel.connected()
        start, end = self._channel.key_range(self._prefix)
        self._generation += 1
        self._subscribed = True
        callback = functools.partial(self._on_event, self._generation)
        try:
            with self._channel.translate(client):
                handle = await client._watcher.add_callback(
                    start, callback, range_end=end, start_revision=self._next_revision
                )
        except BaseException:
            self._subscribed = False
            raise
        self._watcher, self._watch_id = client._watcher, handle.watch_id

    async def _on_event(self, generation: int, item: Any) -> None:
        if generation != self._generation or not self.active:
            return
        if isinstance(item, aetcd.exceptions.RevisionCompactedError):
            self.fail(Compacted(int(item.compacted_revision)))
            return
        if item is None or isinstance(item, BaseException):
            self._subscribed = False  # stream broke (or client closed): re-subscribe on demand
            self.wake()
            return
        kind = EventKind.PUT if item.kind == "PUT" else EventKind.DELETE
        event = WatchEvent(
            kind=kind,
            key=self._channel.strip(item.kv.key),
            value=bytes(item.kv.value) if kind is EventKind.PUT else b"",
            mod_revision=int(item.kv.mod_revision),
        )
        if self.offer(event):
            self._next_revision = event.mod_revision + 1
        else:
            self._channel.spawn(self._cancel())  # overflowed: stop the server-side watch

    async def _cancel(self) -> None:
        watcher, watch_id = self._watcher, self._watch_id
        self._generation += 1
        self._watcher = self._watch_id = None
        if watcher is not None and watch_id is not None:
            with contextlib.suppress(*CLIENT_ERRORS):
                await watcher.cancel(watch_id)
