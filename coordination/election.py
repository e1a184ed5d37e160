"""Leader election over the metadata store (asyncio shell over election_core).

Owns: one candidacy - the key ``keys.election(name) + candidate_id`` held under
the candidate's ``LeaseSession`` - and the waiting for leadership.
Rule: decisions come from ``election_core`` (lowest create_revision leads; wait
for the predecessor's key to go). Leadership ends when the session is lost or on
``resign()``; ``is_leader`` is then False. Being leader is a liveness hint: any
write a leader makes to shared state must still be fenced or compare-and-swapped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from coordination import election_core as core
from coordination import keys
from coordination.errors import Compacted, LeaseLost, WatchOverflow
from coordination.prefix_view import follow_prefix, list_with_revision
from coordination.session import LeaseSession
from coordination.store import EventKind, MetadataStore
from coordination.watch_stream import close_watch


async def current_leader(store: MetadataStore, name: str) -> str | None:
    """The leader of election ``name`` right now, or None."""
    prefix = keys.election(name)
    return core.leader_id(core.candidates_from_listing(prefix, await store.list_prefix(prefix)))


async def observe_leader(store: MetadataStore, name: str) -> AsyncGenerator[str | None, None]:
    """Yield the leader id of election ``name`` now and whenever it changes
    (None while there is no candidate). Needs no candidacy."""
    prefix = keys.election(name)
    last: object = object()
    async for entries in follow_prefix(store, prefix):
        now = core.leader_id(core.candidates_from_entries(prefix, entries))
        if now != last:
            last = now
            yield now


class Election:
    """Candidate ``candidate_id`` in election ``name``, under ``session``'s lease."""

    def __init__(
        self,
        store: MetadataStore,
        name: str,
        candidate_id: str,
        session: LeaseSession,
        value: bytes | None = None,
    ) -> None:
        core.validate_candidate_id(candidate_id)
        self.store = store
        self.name = name
        self.candidate_id = candidate_id
        self.session = session
        self.value = candidate_id.encode() if value is None else value
        self.prefix = keys.election(name)
        self.key = self.prefix + candidate_id
        self._leader = False
        self._mod_revision = 0  # of my key, once created

    @property
    def mod_revision(self) -> int:
        """Of my key while I lead (0 otherwise): what a write fenced by my leadership compares."""
        return self._mod_revision if self._leader else 0

    @property
    def is_leader(self) -> bool:
        return self._leader and not self.session.lost.is_set()

    async def campaign(self) -> None:
        """Return once this candidate leads. Raises ``LeaseLost`` if the session is lost
        first; ``Unavailable`` if the store cannot be reached."""
        while True:
            if self.session.lost.is_set():
                raise LeaseLost(f"cannot campaign in {self.name!r}: {self.session.lost_reason}")
            listing, revision = await list_with_revision(self.store, self.prefix)
            candidates = core.candidates_from_listing(self.prefix, listing)
            step = core.campaign_step(candidates, self.candidate_id, self.session.lease_id)
            if isinstance(step, core.Create):
                await self.store.compare_and_swap(self.key, self.value, 0, lease=self.session.lease_id)
            elif isinstance(step, core.Lead):
                mine = next(kv for kv in listing if kv.key == self.key)
                self._mod_revision = mine.mod_revision
                self._leader = True
                return
            elif isinstance(step, core.WaitFor):
                await self._wait_deleted(self.prefix + step.candidate_id, revision + 1)
            else:
                await self._wait_deleted(self.key, revision + 1)

    async def leader(self) -> str | None:
        return await current_leader(self.store, self.name)

    async def observe(self) -> AsyncGenerator[str | None, None]:
        """Yield the leader id now and on every change."""
        async for leader_id in observe_leader(self.store, self.name):
            yield leader_id

    async def resign(self) -> None:
        """Give up leadership (or candidacy): delete my key if it is still mine."""
        self._leader = False
        if self._mod_revision:
            await self.store.compare_and_delete(self.key, self._mod_revision)
        else:
            current = await self.store.get(self.key)
            if current is not None and current.lease == self.session.lease_id:
                await self.store.compare_and_delete(self.key, current.mod_revision)
        self._mod_revision = 0

    async def _wait_deleted(self, key: str, from_revision: int) -> None:
        """Wait until ``key`` is deleted (or the watch must be re-listed), or the
        session is lost (raises ``LeaseLost``)."""
        watch = self.store.watch_prefix(key, from_revision)

        async def deleted() -> None:
            try:
                async for event in watch:
                    if event.key == key and event.kind is EventKind.DELETE:
                        return
            except (Compacted, WatchOverflow):
                return  # history gone or we fell behind: the caller re-lists

        waiter = asyncio.ensure_future(deleted())
        lost = asyncio.ensure_future(self.session.lost.wait())
        try:
            done, _ = await asyncio.wait({waiter, lost}, return_when=asyncio.FIRST_COMPLETED)
            if waiter in done:
                waiter.result()
            else:
                raise LeaseLost(f"session lost while campaigning in {self.name!r}")
        finally:
            for task in (waiter, lost):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await close_watch(watch)
