"""Writes of the analytics service fenced by its leadership (asyncio shell over the store).

Owns: ``Fence`` - the elected service's election key and that key's
``mod_revision`` - with ``put`` (a result, the summary, the schedule record),
``swap`` (a SQL answer) and ``update`` (the check-modify-CAS loop of the run
record), each one etcd
transaction that also compares the election key. Rule: a service that was
paused past its lease (its election key deleted, maybe another service elected
since) has every write refused by etcd itself - never by a check made before
the write - and gets ``Fenced``; so a former leader never overwrites newer
results or a newer run's progress (docs/decisions/0012-analytics-keys.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordination.errors import CompareFailed
from coordination.store import MetadataStore

ATTEMPTS = 64


class Fenced(Exception):
    """This service no longer holds the analytics election: its write was refused."""


@dataclass(frozen=True, slots=True)
class Fence:
    store: MetadataStore
    key: str  # the service's key in the analytics election
    mod_revision: int  # of that key when the service was elected

    async def _check(self) -> None:
        held = await self.store.get(self.key)
        if held is None or held.mod_revision != self.mod_revision:
            raise Fenced(f"analytics election key {self.key} is no longer this service's")

    async def put(self, key: str, value: bytes) -> int:
        revision = await self.store.put_guarded(key, value, [(self.key, self.mod_revision)])
        if revision is None:
            await self._check()
            raise Fenced(f"write of {key} refused")
        return revision

    async def swap(self, key: str, value: bytes, mod_revision: int) -> int | None:
        """Compare-and-swap ``key`` at ``mod_revision``; None when only ``key`` changed."""
        guards = [(key, mod_revision), (self.key, self.mod_revision)]
        revision = await self.store.put_guarded(key, value, guards)
        if revision is None:
            await self._check()
        return revision

    async def update(self, key: str, modify: Callable[[bytes | None], bytes | None]) -> bytes | None:
        """``modify(current)`` -> new value (None: leave it); the value stored after."""
        for _ in range(ATTEMPTS):
            current = await self.store.get(key)
            old = current.value if current else None
            new = modify(old)
            if new is None:
                return old
            guards = [(key, current.mod_revision if current else 0), (self.key, self.mod_revision)]
            if await self.store.put_guarded(key, new, guards) is not None:
                return new
            await self._check()  # lost the election, or only a race on ``key``: try again
        raise CompareFailed(f"gave up updating {key} after {ATTEMPTS} conflicting writes")
