"""A watched in-memory copy of every namespace's policies, for the hot path.

Owns: ``PolicyCache``: one task lists ``keys.NAMESPACES``, then watches it from
the listing's revision + 1 and keeps decoded ``Policies`` per key; it re-lists on
``Compacted``/``WatchOverflow`` and retries after ``Unavailable``.
Rule: the cache answers only while it is following the store; otherwise (not
started, etcd unreachable, re-listing) and on a miss ``get`` returns None and
the caller reads etcd. Events are applied through ``PrefixView``'s mod_revision
rule, so the owner's own writes can be noted at once (``note``) and the watch
delivering them again later is harmless. Staleness is bounded by the watch
delay (milliseconds), not by a TTL.
"""

from __future__ import annotations

import asyncio
import logging

from coordination import keys
from coordination.errors import Compacted, CoordinationError, WatchOverflow
from coordination.prefix_view import PrefixView, list_with_revision
from coordination.store import EventKind, MetadataStore, WatchEvent
from coordination.tasks import cancel_and_wait
from coordination.watch_stream import close_watch
from gateway.errors import GatewayError
from gateway.meta.policies import Policies

log = logging.getLogger(__name__)

RETRY_S = 0.5  # pause before following again after the store was unreachable
START_WAIT_S = 5.0  # how long start() waits for the first listing


class PolicyCache:
    """Decoded policies per namespace key, kept current by a watch. One task writes it."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._view: PrefixView | None = None  # None: not following, callers read etcd
        self._policies: dict[str, Policies] = {}
        self._task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()

    @property
    def following(self) -> bool:
        return self._view is not None

    async def start(self, wait_s: float = START_WAIT_S) -> None:
        """Start following; wait up to ``wait_s`` for the first listing (reads fall
        through to etcd until it arrives)."""
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="policy-cache")
        try:
            async with asyncio.timeout(wait_s):
                await self._synced.wait()
        except TimeoutError:
            log.warning("policy cache not synced after %.1f s; reading etcd meanwhile", wait_s)

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self._view = None
        self._policies.clear()

    def get(self, key: str) -> Policies | None:
        """Cached policies at ``key``; None when unknown here (read etcd)."""
        if self._view is None:
            return None
        return self._policies.get(key)

    def note(self, key: str, value: bytes, revision: int) -> None:
        """Apply a write this process made (read-your-writes before the watch echoes it)."""
        view = self._view
        if view is not None and view.apply(WatchEvent(EventKind.PUT, key, value, revision)):
            self._refresh(view, key)

    async def _follow(self) -> None:
        prefix = keys.NAMESPACES
        while True:
            watch = None
            pause = False
            try:
                listing, revision = await list_with_revision(self._store, prefix)
                view = PrefixView(prefix, listing, revision)
                watch = self._store.watch_prefix(prefix, revision + 1)
                self._policies = {}
                for key in view.entries:
                    self._refresh(view, key)
                self._view = view
                self._synced.set()
                async for event in watch:
                    if view.apply(event):
                        self._refresh(view, event.key)
                return  # the watch ended cleanly: the store was closed
            except (Compacted, WatchOverflow) as exc:
                log.info("policy cache re-listing after %s", exc.code)
            except CoordinationError as exc:
                log.warning("policy cache lost etcd (%s: %s); retrying in %.1f s", exc.code, exc, RETRY_S)
                pause = True
            except Exception:
                log.exception("policy cache stopped; policies are read from etcd from now on")
                raise
            finally:
                self._view = None
                if watch is not None:
                    await close_watch(watch)
            if pause:
                await asyncio.sleep(RETRY_S)

    def _refresh(self, view: PrefixView, key: str) -> None:
        entry = view.entries.get(key)
        if entry is None:
            self._policies.pop(key, None)
            return
        try:
            self._policies[key] = Policies.decode(entry.value)
        except GatewayError as exc:
            self._policies.pop(key, None)  # a miss: the reader gets the error from etcd
            log.error("undecodable policies at %s (%s): %s", key, exc.code, exc)
