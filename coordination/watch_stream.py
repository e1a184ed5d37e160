"""The watch iterator both metadata stores hand out: a bounded queue with a terminal error.

Owns: delivery of ``WatchEvent``s from a producer (the store) to one consumer,
and how a watch ends.
Rule: the queue is bounded (``WATCH_QUEUE_SIZE`` by default). The producer never
blocks: when the queue is full the watch *fails* with ``WatchOverflow`` instead
of stalling other watchers or growing without limit. Events queued before the
failure are still delivered, in order; then ``__anext__`` raises the error once
and ``StopAsyncIteration`` afterwards. A watch ends with:

- ``WatchOverflow(resume_revision)`` - the consumer was too slow; watch again from
  ``resume_revision`` or re-list;
- ``Compacted`` - the requested start revision is no longer in the history;
- ``Unavailable`` - (etcd) the store stayed unreachable past the reconnect budget;
- ``StopAsyncIteration`` - the consumer called ``aclose()`` or the store was closed.

Consumers should ``aclose()`` a watch they abandon (or use ``async with``); an
abandoned watch is dropped by the store at the latest when its queue overflows.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType

from coordination.errors import CoordinationError, WatchOverflow
from coordination.store import WatchEvent

WATCH_QUEUE_SIZE = 4096  # events buffered per watcher before it is failed with WatchOverflow


class _Wake:
    """Queue sentinel: wakes a consumer blocked on an empty queue (error/close)."""


_WAKE = _Wake()


class WatchStream:
    """``AsyncIterator[WatchEvent]`` fed by ``offer()``; ended by ``fail()``/``finish()``."""

    def __init__(
        self,
        bound: int = WATCH_QUEUE_SIZE,
        replay: Iterable[WatchEvent] = (),
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if bound < 1:
            raise ValueError("watch queue bound must be >= 1")
        self.bound = bound
        self._queue: asyncio.Queue[WatchEvent | _Wake] = asyncio.Queue(maxsize=bound)
        # history replayed before live events; a slice of the store's bounded history
        self._replay: deque[WatchEvent] = deque(replay)
        self._error: CoordinationError | None = None
        self._error_raised = False
        self._finished = False
        self._on_close = on_close
        self.last_offered_revision = 0  # highest revision accepted from the producer
        self.last_delivered_revision = 0  # highest revision handed to the consumer

    # -- producer side (the store) -------------------------------------------------------

    @property
    def active(self) -> bool:
        """False once failed or finished: the producer should stop offering."""
        return self._error is None and not self._finished

    def offer(self, event: WatchEvent) -> bool:
        """Queue one event without blocking. On a full queue the watch fails with
        ``WatchOverflow`` (resume from this event's revision) and False is returned."""
        if not self.active:
            return False
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.fail(WatchOverflow(resume_revision=event.mod_revision, bound=self.bound))
            return False
        self.last_offered_revision = max(self.last_offered_revision, event.mod_revision)
        return True

    def fail(self, error: CoordinationError) -> None:
        """End the watch with ``error`` once the already-queued events are consumed."""
        if self.active:
            self._error = error
            self.wake()

    def finish(self) -> None:
        """End the watch cleanly once the already-queued events are consumed."""
        if self.active:
            self._finished = True
            self.wake()

    def wake(self) -> None:
        """Wake a consumer blocked on an empty queue so it re-checks its state."""
        try:
            self._queue.put_nowait(_WAKE)
        except asyncio.QueueFull:
            pass  # the consumer is not blocked: it will see the state once the queue drains

    # -- consumer side --------------------------------------------------------------------

    async def _before_wait(self) -> None:
        """Hook run when the queue is empty and the watch is still active (etcd: connect)."""

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            if self._replay:
                event = self._replay.popleft()
                self.last_delivered_revision = event.mod_revision
                return event
            if self._queue.empty():
                if self._error is not None:
                    if self._error_raised:
                        raise StopAsyncIteration
                    self._error_raised = True
                    raise self._error
                if self._finished:
                    raise StopAsyncIteration
                await self._before_wait()
                if not self.active and self._queue.empty():
                    continue
            item = await self._queue.get()
            if isinstance(item, _Wake):
                continue
            self.last_delivered_revision = item.mod_revision
            return item

    async def aclose(self) -> None:
        """Stop the watch; further iteration raises ``StopAsyncIteration``."""
        was_active = self.active
        self._finished = True
        self._error = None
        self._replay.clear()
        while not self._queue.empty():
            self._queue.get_nowait()
        if was_active and self._on_close is not None:
            await self._on_close()

    async def __aenter__(self) -> WatchStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def close_watch(watch: object) -> None:
    """``aclose()`` any watch iterator that supports it (both stores' do)."""
    aclose = getattr(watch, "aclose", None)
    if aclose is not None:
        await aclose()
