"""Decoded entries of one topic's log: the messages inside each entry (asyncio shell).

Owns: a bounded cache of decoded entries (oldest out first, beyond
``DECODED_CACHE_ENTRIES`` entries, ``DECODED_CACHE_MESSAGES`` messages or
``DECODED_CACHE_BYTES`` entry bytes: an entry holds up to 1,000 messages, so a
bound in entries alone let one topic keep millions of message objects; and
fewer when the gateway's ``CacheBudget`` needs the room), shared by
every subscription, reader and admin read of the topic, so an entry fanned out
to many consumers is decoded once. Rules: an entry is looked up here first,
then in the managed log's entry cache (no I/O), and only then read from the
storage nodes; positions are confirmed entries only (the managed log never
hands out anything past its last confirmed entry), so a decoded entry never
changes and needs no invalidation. The dispatchers' view of an entry's
messages (``Message``: position, Key_Shared slot, deliver-at, batch size) is built once
per entry here too and shared by every subscription: 1,000 subscriptions of a
hot topic, each holding 1,000 unacked messages, hold 1,000 of these, not a
million.
"""

from __future__ import annotations

from collections import OrderedDict

from gateway.broker.cache_budget import CacheBudget
from gateway.broker.dispatch.base import Message
from gateway.broker.managed_log import ManagedLog
from storage.formats.entry_format import EntryMessage, decode_entry
from storage.formats.key_hash import sticky_slot
from storage.formats.positions import NO_BATCH, MessagePosition, Position

DECODED_CACHE_ENTRIES = 4096
DECODED_CACHE_MESSAGES = 65_536  # per topic; a miss is re-read from the log cache or the nodes
DECODED_CACHE_BYTES = 32 * 1024 * 1024


class DecodedEntries:
    __slots__ = ("__weakref__", "_budget", "_bytes", "_decoded", "_last", "_log", "_messages", "_views")

    def __init__(self, log: ManagedLog, budget: CacheBudget | None = None) -> None:
        self._log = log
        self._decoded: OrderedDict[Position, tuple[list[EntryMessage], int]] = OrderedDict()  # + bytes
        self._messages = 0  # decoded messages held
        self._bytes = 0  # entry bytes held
        self._last: tuple[int, int, list[EntryMessage]] | None = None  # of messages_at
        self._views: dict[Position, list[Message]] = {}  # of entries in ``_decoded``
        self._budget = budget  # the gateway's, shared with the log's caches
        if self._budget is not None:
            self._budget.join(self)

    @property
    def held(self) -> tuple[int, int, int]:
        """(entries, messages, entry bytes) held now."""
        return len(self._decoded), self._messages, self._bytes

    def messages(self, position: Position, payload: bytes) -> list[EntryMessage]:
        """The messages of the entry at ``position`` whose bytes are ``payload``."""
        cached = self._decoded.get(position)
        if cached is not None:
            return cached[0]
        decoded = decode_entry(payload)
        before = self._bytes
        self._decoded[position] = (decoded, len(payload))
        self._messages += len(decoded)
        self._bytes += len(payload)
        while len(self._decoded) > 1 and (
            len(self._decoded) > DECODED_CACHE_ENTRIES
            or self._messages > DECODED_CACHE_MESSAGES
            or self._bytes > DECODED_CACHE_BYTES
        ):
            self._drop_oldest()
        if self._budget is not None:
            self._budget.grew(self._bytes - before)
        return decoded

    def dispatch_view(self, position: Position, payload: bytes) -> list[Message]:
        """The dispatchers' ``Message`` for each message of the entry (by batch index),
        built once while the entry is decoded here; callers must not change it."""
        view = self._views.get(position)
        if view is not None:
            return view
        decoded = self.messages(position, payload)
        ledger_id, entry_id = position.ledger_id, position.entry_id
        new_position = tuple.__new__  # MessagePosition(...) without its Python-level __new__
        batch_size = len(decoded) if len(decoded) > 1 else 0
        view = [
            Message(
                new_position(MessagePosition, (ledger_id, entry_id, index if batch_size else NO_BATCH)),
                sticky_slot(m.ordering_key, m.key),
                m.deliver_at_ms,
                batch_size,
            )
            for index, m in enumerate(decoded)
        ]
        if position in self._decoded:  # not when the entry alone is over the cache's bounds
            self._views[position] = view
        return view

    def _drop_oldest(self) -> int:
        old_position, (old_messages, old_bytes) = self._decoded.popitem(last=False)
        self._views.pop(old_position, None)
        self._messages -= len(old_messages)
        self._bytes -= old_bytes
        return old_bytes

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def shrink(self, nbytes: int) -> int:
        """Drop the oldest decoded entries until ``nbytes`` are freed (the gateway's
        cache budget needs the room) or none is left."""
        freed = 0
        while freed < nbytes and self._decoded:
            freed += self._drop_oldest()
        return freed

    def clear(self) -> None:
        """Drop everything and leave the budget (the topic is closed)."""
        if self._budget is not None:
            self._budget.forget(self)
        self._decoded.clear()
        self._views.clear()
        self._messages = self._bytes = 0
        self._last = None

    def cached_messages(self, position: Position) -> list[EntryMessage] | None:
        """The messages at ``position`` if decoded or in the log's cache (no I/O), else None."""
        cached = self._decoded.get(position)
        if cached is not None:
            return cached[0]
        payload = self._log.cache.get(position)
        return None if payload is None else self.messages(position, payload)

    def messages_at(self, position: MessagePosition) -> list[EntryMessage] | None:
        """``cached_messages`` of the entry holding ``position``. Deliveries come in runs
        of one entry's messages, so the last entry found is remembered (no Position
        built, no lookup for the rest of the run)."""
        last = self._last
        if last is not None and last[1] == position.entry_id and last[0] == position.ledger_id:
            return last[2]
        found = self.cached_messages(position.entry)
        if found is not None:
            self._last = (position.ledger_id, position.entry_id, found)
        return found

    async def load_messages(self, position: Position) -> list[EntryMessage] | None:
        """The messages at ``position``, read from the storage nodes if need be; None
        if the entry is gone (trimmed)."""
        cached = self.cached_messages(position)
        if cached is not None:
            return cached
        payload = await self._log.read_entry(position)
        return None if payload is None else self.messages(position, payload)
