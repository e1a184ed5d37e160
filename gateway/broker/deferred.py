"""A subscription's effects that wait for their entries, kept in order (asyncio shell).

Owns: ``DeferredEffects``, the queue of one subscription's effects that could not
be applied at once (deliveries whose entry is no longer cached: it is read back
from the storage nodes first) and the one task that applies them, oldest first;
and ``apply_later``, how such effects (and dead letters) are applied.
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
from typing import TYPE_CHECKING

from gateway.broker import letters
from gateway.broker.consumers import resolve_deliveries
from gateway.broker.dispatch import DeadLetter, Deliver, Effect
from storage.formats.positions import Position

if TYPE_CHECKING:
    from gateway.broker.subscription import Subscription
    from storage.formats.entry_format import EntryMessage

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


async def apply_later(sub: Subscription, effects: list[Effect]) -> None:
    """Apply ``effects`` in order: deliveries once their entries are at hand (read
    back from the storage nodes if need be), dead letters by publishing them."""
    delivers: list[Deliver] = []
    loaded: dict[Position, list[EntryMessage] | None] = {}
    for effect in effects:
        if isinstance(effect, Deliver):
            entry = effect.message.position.entry
            if entry not in loaded:
                try:
                    loaded[entry] = await sub.topic.decoded.load_messages(entry)
                except Exception as exc:  # its messages stay pending: redelivered later
                    log.warning("subscription %s: reading entry %s back failed: %s", sub.name, entry, exc)
                    loaded[entry] = None
            delivers.append(effect)  # one whose entry is gone (trimmed, unreadable) is dropped
        elif isinstance(effect, DeadLetter):
            await letters.dead_letter_effect(sub, effect)
    deliveries, _ = resolve_deliveries(delivers, lambda position: loaded[position.entry])
    sub.send(deliveries)
