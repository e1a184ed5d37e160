"""A watched, always-running local copy of one etcd prefix (asyncio shell).

Owns: one task that lists a prefix, then applies watch events to a
``coordination.prefix_view.PrefixView``; re-lists on ``Compacted`` /
``WatchOverflow`` and, after a pause, on ``Unavailable`` or any other store error.
Rule: readers get the view's ``entries`` and ``revision`` (the store revision the
view reflects) without an etcd round trip; ``on_change(key)`` is called
synchronously by the task after every event with the event's key, and with None
after every (re-)listing (anything may have changed); it must not block (spawn a
task for I/O).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from coordination.errors import Compacted, CoordinationError, WatchOverflow
from coordination.prefix_view import Entry, PrefixView, list_with_revision
from coordination.store import MetadataStore
from coordination.tasks import BackgroundTask
from coordination.watch_stream import close_watch

log = logging.getLogger(__name__)

RETRY_S = 0.5  # pause before re-listing after a store error


class WatchedPrefix:
    """``await start()`` returns after the first listing; ``close()`` stops the task."""

    def __init__(
        self,
        store: MetadataStore,
        prefix: str,
        on_change: Callable[[str | None], None] | None = None,
        *,
        retry_s: float = RETRY_S,
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.on_change = on_change
        self.retry_s = retry_s
        self.ready = asyncio.Event()
        self._view = PrefixView(prefix, [], 0)
        self._loop = BackgroundTask(f"watch {prefix}")

    @property
    def entries(self) -> Mapping[str, Entry]:
        return self._view.entries

    @property
    def revision(self) -> int:
        return self._view.revision

    async def start(self) -> None:
        self._loop.start(self._run)
        await self.ready.wait()

    async def close(self) -> None:
        await self._loop.close()

    def _changed(self, key: str | None) -> None:
        if self.on_change is not None:
            try:
                self.on_change(key)
            except Exception:  # a listener bug must not stop the cache
                log.exception("change listener of %s failed", self.prefix)

    async def _run(self) -> None:
        while True:
            try:
                listing, revision = await list_with_revision(self.store, self.prefix)
                view = PrefixView(self.prefix, listing, revision)
                self._view = view
                self.ready.set()
                self._changed(None)
                watch = self.store.watch_prefix(self.prefix, revision + 1)
                try:
                    async for event in watch:
                        view.apply(event)
                        self._changed(event.key)
                finally:
                    await close_watch(watch)
                return  # the watch ended cleanly: the store was closed
            except (Compacted, WatchOverflow):
                continue
            except CoordinationError as exc:
                log.warning("watch of %s failed, re-listing in %.1fs: %r", self.prefix, self.retry_s, exc)
                await asyncio.sleep(self.retry_s)
