"""The metadata-store port: what every part of Folio may ask of etcd.

Owns: the ``MetadataStore`` protocol, its value types, and ``update_with_retry``,
the single check-modify-CAS-retry loop every metadata update goes through.
Rule: every write that depends on what was read is a compare-and-swap on the
key's ``mod_revision`` (0 = "must not exist"); nothing trusts a read alone.
Two implementations share these semantics and one contract test suite:
``memory_store.MemoryStore`` (unit/simulation) and ``etcd_store.EtcdStore``.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from coordination.errors import CompareFailed


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int  # 0 = no lease


class EventKind(enum.Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: EventKind
    key: str
    value: bytes  # empty for DELETE
    mod_revision: int  # revision of this change


class MetadataStore(Protocol):
    """Async key-value store with revisions, CAS, leases and resumable watches."""

    async def get(self, key: str) -> KeyValue | None: ...

    async def list_prefix(self, prefix: str) -> list[KeyValue]:
        """All keys starting with ``prefix``, sorted by key."""
        ...

    async def revision(self) -> int:
        """The store's current revision (for starting a watch after a listing)."""
        ...

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Unconditional put; returns the new revision."""
        ...

    async def delete(self, key: str) -> bool: ...

    async def delete_prefix(self, prefix: str) -> int: ...

    async def compare_and_swap(
        self, key: str, value: bytes, expected_mod_revision: int, lease: int = 0
    ) -> int | None:
        """Put if the key's mod_revision equals ``expected_mod_revision``
        (0 means the key must not exist). Returns the new revision, or None
        when the comparison failed."""
        ...

    async def compare_and_delete(self, key: str, expected_mod_revision: int) -> bool: ...

    async def put_guarded(self, key: str, value: bytes, guards: Sequence[tuple[str, int]]) -> int | None:
        """Put ``key`` in one transaction if every ``(guard key, mod_revision)`` holds (0: the
        guard key must not exist), e.g. a leader's election key still being its own. Returns
        the new revision, or None when a comparison failed."""
        ...

    async def grant_lease(self, ttl_s: int) -> int: ...

    async def refresh_lease(self, lease: int) -> None:
        """Keep a lease alive; raises ``LeaseLost`` if it is gone."""
        ...

    async def revoke_lease(self, lease: int) -> None: ...

    def watch_prefix(self, prefix: str, start_revision: int = 0) -> AsyncIterator[WatchEvent]:
        """Events for keys under ``prefix`` from ``start_revision`` (inclusive;
        0 = from now). Iteration ends only when the consumer stops."""
        ...

    async def close(self) -> None: ...


async def update_with_retry(
    store: MetadataStore,
    key: str,
    modify: Callable[[bytes | None], Awaitable[bytes | None] | bytes | None],
    attempts: int = 64,
) -> tuple[bytes | None, int]:
    """The check-modify-CAS-retry loop.

    ``modify`` gets the current value (None if absent) and returns the new value,
    or None to leave the key as it is (the loop then returns the current value).
    Returns (value now stored, its mod_revision). Raises ``CompareFailed`` after
    ``attempts`` lost races.
    """
    for _ in range(attempts):
        current = await store.get(key)
        old = current.value if current else None
        result = modify(old)
        new = await result if inspect.isawaitable(result) else result
        if new is None:
            return old, current.mod_revision if current else 0
        revision = await store.compare_and_swap(key, new, current.mod_revision if current else 0)
        if revision is not None:
            return new, revision
    raise CompareFailed(f"gave up updating {key} after {attempts} conflicting writes")
