"""The ownership manager's callbacks and background tasks, run as bundles come and go (asyncio shell).

Owns: ``Hooks``, the callbacks registered for bundles acquired and lost, the
unload hook, and the set of background tasks the manager spawns. Rules: a
callback that raises is logged and never stops the ones after it; an awaitable
a callback returns runs as a task; every task is tracked until it ends (a
failure is logged) so the manager can cancel it when it closes; the unload hook gets a time
limit, and an unload goes on when it fails or times out (the load manager's
decision stands; ledger fencing covers stragglers).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable

from gateway.ownership.bundles import NamespaceBundle
from gateway.ownership.held_bundles import LossReason

log = logging.getLogger(__name__)

BundleLostCallback = Callable[[NamespaceBundle, LossReason], Awaitable[None] | None]
BundleCallback = Callable[[NamespaceBundle], Awaitable[None] | None]
UnloadHook = Callable[[NamespaceBundle], Awaitable[None]]


class Hooks:
    def __init__(self, gateway_id: str) -> None:
        self._gateway_id = gateway_id
        self.lost: list[BundleLostCallback] = []
        self.acquired: list[BundleCallback] = []
        self.unload: UnloadHook | None = None
        self._tasks: set[asyncio.Task[object]] = set()

    def fire_lost(self, nb: NamespaceBundle, reason: LossReason) -> None:
        self._fire(self.lost, nb, reason)

    def fire_acquired(self, nb: NamespaceBundle) -> None:
        self._fire(self.acquired, nb)

    async def before_unload(self, nb: NamespaceBundle, timeout_s: float) -> None:
        """Run the unload hook for ``nb`` within ``timeout_s``; a failure is logged."""
        if self.unload is None:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self.unload(nb)
        except TimeoutError:  # e.g. its topics' appends wait on storage that does not answer
            log.warning("gateway %s: unload of %s took over %.1f s", self._gateway_id, nb, timeout_s)
        except Exception:
            log.exception("gateway %s: unload hook for %s failed; releasing anyway", self._gateway_id, nb)

    def spawn(self, awaitable: Awaitable[object]) -> None:
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def tasks(self) -> list[asyncio.Task[object]]:
        """The background tasks still running (to cancel at close)."""
        return list(self._tasks)

    def _fire(self, callbacks: Iterable[Callable[..., Awaitable[None] | None]], *args: object) -> None:
        for callback in list(callbacks):
            try:
                result = callback(*args)
                if inspect.isawaitable(result):
                    self.spawn(result)
            except Exception:
                log.exception("ownership callback %r failed", callback)

    def _task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("ownership task failed", exc_info=task.exception())
