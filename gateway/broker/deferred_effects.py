"""A subscription's effects that wait for their entries, kept in order (asyncio shell).

Owns: ``DeferredEffects``, the queue of one subscription's effects that could not
be applied at once (deliveries whose entry is no longer cached: it is read back
from the storage nodes first) and the one task that applies them, oldest first
(with the function the subscription gives it: ``Subscription.apply_later``).
Rule: while anything waits here, every later delivery of the subscription waits
behind it, so a message whose entry must be read back is never overtaken by the
messages after it (Exclusive, Failover, Key_Shared and readers deliver in log
order). The queue is bounded by the dispatcher's credit: only deliveries the
consumers have room for are ever queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from gateway.broker.dispatch import Effect

log = logging.getLogger(__name__)


class DeferredEffects:
    def __init__(self, apply: Callable[[list[Effect]], Awaitable[None]]) -> None:
        self._apply = apply
        self._queue: list[Effect] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """Something waits: later deliveries must queue behind it."""
        return self._task is not None

    def add(self, effects: list[Effect]) -> None:
        self._queue += effects
        if self._task is None and self._queue:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    await self._apply(batch)
                except Exception:
                    log.exception("deferred deliveries failed; %d effects dropped", len(batch))
        finally:
            self._task = None

    async def close(self) -> None:
        task, self._task = self._task, None
        self._queue.clear()
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
