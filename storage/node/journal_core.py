"""The journal's group-commit policy, BookKeeper's ``Journal.run`` as a core (pure).

Owns: the queue of journal records waiting to be written, written-but-unsynced
records, and the one sync in flight. No I/O, no clock: time comes in as
``now_ms`` and decisions go out as effects the shell executes in order.

Rules (BookKeeper journal settings, docs/compatibility.md §6.6):
- a group is closed (``Write`` of its records, in arrival order) when the oldest
  waiting record has waited ``max_group_wait_ms`` (journalMaxGroupWaitMSec=2),
  when ``buffered_bytes_threshold`` bytes wait (journalBufferedWritesThreshold),
  when ``buffered_entries_threshold`` records wait (0 = off), or when the shell
  reports its input queue empty and ``flush_when_queue_empty`` is set;
- at most one ``Sync`` is in flight; a Sync covers every record written before
  it was issued; records are acked (``Ack``) only after their Sync completed,
  always in arrival order;
- while a sync is in flight only the size thresholds close a group (the bytes
  go to the OS early); time and idle triggers wait for the sync to finish,
  because a Write alone makes nothing durable;
- the queue is bounded (records and bytes, ``journalQueueSize``): a record that
  does not fit is refused with ``Reject`` (backpressure), never dropped later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

RECORDS_MAX = 10_000  # journalQueueSize
BYTES_MAX = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class JournalConfig:
    max_group_wait_ms: int = 2
    buffered_bytes_threshold: int = 512 * 1024
    buffered_entries_threshold: int = 0  # 0 = off
    flush_when_queue_empty: bool = False
    max_queued_records: int = RECORDS_MAX
    max_queued_bytes: int = BYTES_MAX

    def __post_init__(self) -> None:
        assert self.max_group_wait_ms >= 0
        assert self.buffered_bytes_threshold > 0
        assert self.buffered_entries_threshold >= 0
        assert self.max_queued_records > 0 and self.max_queued_bytes > 0


@dataclass(frozen=True, slots=True)
class Write:
    """Append these records to the journal file (no sync yet)."""

    record_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Sync:
    """fdatasync the journal; covers every record written so far (``record_ids``)."""

    batch_id: int
    record_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Ack:
    """These records are durable; answer their requests, in this order."""

    record_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Reject:
    """The queue is full: refuse this record (nothing was queued)."""

    record_id: int


Effect = Write | Sync | Ack | Reject
_NOTHING: list[Effect] = []  # shared empty result: callers must not mutate effect lists


class JournalCore:
    def __init__(self, config: JournalConfig | None = None) -> None:
        self.config = config or JournalConfig()
        # waiting records: (record_id, size, enqueue_ms), oldest first
        self._pending: deque[tuple[int, int, int]] = deque()
        self._pending_bytes = 0
        self._written: list[int] = []  # written, not yet covered by a sync
        self._written_bytes = 0
        self._in_flight: tuple[int, ...] | None = None
        self._in_flight_bytes = 0
        self._next_batch = 1
        self._queued_records = 0  # pending + written + in flight
        self._queued_bytes = 0

    # ------------------------------------------------------------ inputs

    def on_add(self, record_id: int, size: int, now_ms: int) -> list[Effect]:
        assert size > 0
        config = self.config
        if (
            self._queued_records >= config.max_queued_records
            or self._queued_bytes + size > config.max_queued_bytes
        ):
            return [Reject(record_id)]
        self._queued_records += 1
        self._queued_bytes += size
        self._pending.append((record_id, size, now_ms))
        self._pending_bytes += size
        if self._pending_bytes >= config.buffered_bytes_threshold or (
            config.buffered_entries_threshold > 0 and len(self._pending) >= config.buffered_entries_threshold
        ):
            return self._close_group()
        return _NOTHING

    def on_timer(self, now_ms: int) -> list[Effect]:
        if self._in_flight is None and self._pending and self._time_trigger(now_ms):
            return self._close_group()
        return _NOTHING

    def on_queue_empty(self, now_ms: int) -> list[Effect]:
        """The shell has no more input right now (BookKeeper's "queue empty")."""
        if self.config.flush_when_queue_empty and self._in_flight is None and self._pending:
            return self._close_group()
        return []

    def on_flush(self, now_ms: int) -> list[Effect]:
        """Close the waiting group now if no sync is in flight (shutdown, drains)."""
        if self._in_flight is None and self._pending:
            return self._close_group()
        return []

    def on_sync_done(self, now_ms: int) -> list[Effect]:
        assert self._in_flight is not None, "sync completion without a sync in flight"
        effects: list[Effect] = [Ack(self._in_flight)]
        self._queued_records -= len(self._in_flight)
        self._queued_bytes -= self._in_flight_bytes
        self._in_flight = None
        self._in_flight_bytes = 0
        if self._pending and (
            self._size_trigger() or self._time_trigger(now_ms) or self.config.flush_when_queue_empty
        ):
            effects.extend(self._close_group())
        elif self._written:
            effects.append(self._issue_sync())
        return effects

    # ------------------------------------------------------------ queries

    def next_deadline_ms(self) -> int | None:
        """When ``on_timer`` must be called next (None = nothing time-bound)."""
        if self._in_flight is not None or not self._pending:
            return None
        return self._pending[0][2] + self.config.max_group_wait_ms

    @property
    def queued_records(self) -> int:
        return self._queued_records

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    @property
    def sync_in_flight(self) -> bool:
        return self._in_flight is not None

    @property
    def idle(self) -> bool:
        return self.queued_records == 0

    # ------------------------------------------------------------ internals

    def _size_trigger(self) -> bool:
        entries = self.config.buffered_entries_threshold
        return self._pending_bytes >= self.config.buffered_bytes_threshold or (
            entries > 0 and len(self._pending) >= entries
        )

    def _time_trigger(self, now_ms: int) -> bool:
        return bool(self._pending) and now_ms - self._pending[0][2] >= self.config.max_group_wait_ms

    def _close_group(self) -> list[Effect]:
        ids = tuple(record_id for record_id, _, _ in self._pending)
        self._written.extend(ids)
        self._written_bytes += self._pending_bytes
        self._pending.clear()
        self._pending_bytes = 0
        effects: list[Effect] = [Write(ids)]
        if self._in_flight is None:
            effects.append(self._issue_sync())
        return effects

    def _issue_sync(self) -> Sync:
        assert self._in_flight is None and self._written
        batch = tuple(self._written)
        self._in_flight = batch
        self._in_flight_bytes = self._written_bytes
        self._written = []
        self._written_bytes = 0
        sync = Sync(self._next_batch, batch)
        self._next_batch += 1
        return sync
