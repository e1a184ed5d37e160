"""A live view of every key under a prefix: list once, then apply watch events.

Owns: ``PrefixView`` (pure: a listing plus the events after it -> current entries)
and ``follow_prefix`` (the asyncio loop: list, watch from the listing's
revision + 1, re-list on ``Compacted``/``WatchOverflow``). Membership and
election observers are built on it.
Rule: an event is applied only if it is newer than what the view holds for that
key (``mod_revision`` order), so replays after a re-list or a resumed watch are
harmless. ``create_revision`` is tracked from events (a PUT of a key the view
does not hold creates it at that revision), which is exact because the view
starts from a complete listing.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from coordination.errors import Compacted, WatchOverflow
from coordination.store import EventKind, KeyValue, MetadataStore, WatchEvent
from coordination.watch_stream import close_watch


@dataclass(frozen=True, slots=True)
class Entry:
    value: bytes
    create_revision: int
    mod_revision: int


class PrefixView:
    """Current entries under ``prefix`` as of ``revision``. Owned by one task."""

    def __init__(self, prefix: str, listing: Iterable[KeyValue], revision: int) -> None:
        self.prefix = prefix
        self.revision = revision
        self.entries: dict[str, Entry] = {
            kv.key: Entry(kv.value, kv.create_revision, kv.mod_revision)
            for kv in listing
            if kv.key.startswith(prefix)
        }
        # deletions the view has seen, so a stale PUT replayed after them is ignored
        self._deleted_at: dict[str, int] = {}

    def apply(self, event: WatchEvent) -> bool:
        """Apply one event; True if the entries changed."""
        if not event.key.startswith(self.prefix):
            return False
        self.revision = max(self.revision, event.mod_revision)
        current = self.entries.get(event.key)
        if current is not None and current.mod_revision >= event.mod_revision:
            return False
        if event.kind is EventKind.DELETE:
            if current is None:
                return False
            del self.entries[event.key]
            self._deleted_at[event.key] = event.mod_revision
            return True
        if self._deleted_at.get(event.key, 0) >= event.mod_revision:
            return False
        created = current.create_revision if current is not None else event.mod_revision
        self.entries[event.key] = Entry(event.value, created, event.mod_revision)
        self._deleted_at.pop(event.key, None)
        return current is None or current.value != event.value

    def snapshot(self) -> dict[str, Entry]:
        return dict(self.entries)


@runtime_checkable
class ListsAtRevision(Protocol):
    """Stores that return a listing together with its revision (both of ours do)."""

    async def list_prefix_at(self, prefix: str) -> tuple[list[KeyValue], int]: ...


async def list_with_revision(store: MetadataStore, prefix: str) -> tuple[list[KeyValue], int]:
    """A listing and a revision R such that watching from R + 1 misses nothing."""
    if isinstance(store, ListsAtRevision):
        return await store.list_prefix_at(prefix)
    # Fallback: the revision read *before* the listing; replayed events are
    # filtered by PrefixView's mod_revision rule.
    revision = await store.revision()
    return await store.list_prefix(prefix), revision


async def follow_prefix(store: MetadataStore, prefix: str) -> AsyncGenerator[Mapping[str, Entry], None]:
    """Yield the full ``{key: Entry}`` map under ``prefix`` now and after every change.

    Re-lists when the watch reports ``Compacted`` or ``WatchOverflow``; any other
    error (``Unavailable``) ends the iteration by propagating to the caller.
    Several keys removed in one revision (lease expiry) may be yielded one by one.
    """
    last: dict[str, Entry] | None = None
    while True:
        listing, revision = await list_with_revision(store, prefix)
        view = PrefixView(prefix, listing, revision)
        watch = store.watch_prefix(prefix, revision + 1)  # before yielding: no gap, even in memory
        try:
            if view.entries != last:
                last = view.snapshot()
                yield last
            async for event in watch:
                if view.apply(event):
                    last = view.snapshot()
                    yield last
        except (Compacted, WatchOverflow):
            continue
        finally:
            await close_watch(watch)
        return  # the watch ended cleanly: the store was closed
