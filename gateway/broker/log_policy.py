"""Managed-log policy decisions: when to roll a ledger and which ledgers to trim (pure).

Owns: ``RolloverPolicy`` and the decisions ``should_roll``, ``new_ledger_due``,
``route_append`` and ``ledgers_to_trim``. Rules (docs/compatibility.md §4.11, §5.3):
- roll the open ledger once it holds ``entries_max`` entries or ``bytes_max``
  bytes, or has been open ``age_max_ms`` (and is not empty);
- a log whose writer lost its write quorum (``QuorumLost``: too few writable
  nodes left in its ensemble and none to replace them), or whose roll closed
  the old ledger but could not create the next, has no writable ledger: the
  old one is closed at its last confirmed entry and a new one is created as
  Pulsar's ManagedLedger does - at once, then on the next append at most every
  ``ROLL_RETRY_MS`` while it fails (too few writable nodes); appends in between
  get a retriable error, appends during an attempt wait for it;
- a ledger may be deleted only when it is closed, every durable cursor has
  passed all of its entries (mark-delete at or beyond its last entry), and
  retention no longer protects it: retention keeps consumed ledgers while
  both the time limit (since the ledger was closed) and the size limit (newest
  consumed ledgers first) hold; -1 means unlimited, 0 means nothing is kept;
- the open (last) ledger is never trimmed.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from storage.errors import QuorumLost, StorageError
from storage.formats.log_record import LedgerInfo
from storage.formats.positions import Position

ROLL_RETRY_MS = 500


@dataclass(frozen=True, slots=True)
class RolloverPolicy:
    entries_max: int = 50_000  # managedLedgerMaxEntriesPerLedger
    bytes_max: int = 512 * 1024 * 1024
    age_max_ms: int = 4 * 3600 * 1000  # managedLedgerMaxLedgerRolloverTimeMinutes


@dataclass(frozen=True, slots=True)
class Retention:
    minutes: int = 0  # -1 = unlimited
    size_mb: int = 0  # -1 = unlimited


def should_roll(policy: RolloverPolicy, entries: int, size: int, opened_ms: int, now_ms: int) -> bool:
    if entries <= 0:
        return False
    return (
        entries >= policy.entries_max or size >= policy.bytes_max or now_ms - opened_ms >= policy.age_max_ms
    )


def writer_lost_quorum(error: StorageError | None) -> bool:
    """The open ledger's writer can take no more appends, but nobody fenced it."""
    return isinstance(error, QuorumLost)


def new_ledger_due(last_failed_ms: int | None, now_ms: int, retry_ms: int = ROLL_RETRY_MS) -> bool:
    """May a log without a writable ledger try to create one now? ``last_failed_ms``:
    when the last attempt failed (None: none failed yet)."""
    return last_failed_ms is None or now_ms - last_failed_ms >= retry_ms


class AppendRoute(enum.Enum):
    """Where an append goes (the log is neither fenced, closed nor terminated)."""

    WRITE = "write"  # to the open ledger's writer
    WAIT = "wait"  # for the roll under way (or the first writer)
    ROLL = "roll"  # no writable ledger and a new one is due: wait, and roll now
    REFUSE = "refuse"  # no writable ledger and no new one due yet: a retriable error


def route_append(
    rolling: bool,
    has_writer: bool,
    unwritable: bool,
    writer_error: StorageError | None,
    last_failed_ms: int | None,
    now_ms: int,
) -> AppendRoute:
    """The route of one append. ``unwritable``: a roll closed the old ledger but
    found too few writable nodes for the next; ``writer_error``: the open writer's."""
    if rolling or not has_writer:
        return AppendRoute.WAIT
    if unwritable or writer_lost_quorum(writer_error):
        return AppendRoute.ROLL if new_ledger_due(last_failed_ms, now_ms) else AppendRoute.REFUSE
    return AppendRoute.WRITE


def ledgers_to_trim(
    ledgers: Sequence[LedgerInfo], consumed_upto: Position | None, retention: Retention, now_ms: int
) -> list[int]:
    """Ids of ledgers to delete, oldest first. ``consumed_upto`` is the slowest
    durable cursor's mark-delete (None: no durable subscription, all consumed)."""
    if len(ledgers) <= 1:
        return []
    closed = list(ledgers[:-1])  # the last ledger is the open one
    consumed = [
        info
        for info in closed
        if consumed_upto is None
        or info.ledger_id < consumed_upto.ledger_id
        or (info.ledger_id == consumed_upto.ledger_id and consumed_upto.entry_id >= info.entries - 1)
    ]
    if retention.minutes == -1 and retention.size_mb == -1:
        return []
    # consumed ledgers form a prefix of the log; keep the newest ones within retention
    doomed: list[int] = []
    kept_bytes = 0
    size_limit = retention.size_mb * 1024 * 1024
    for info in reversed(consumed):
        within_time = retention.minutes == -1 or now_ms - info.timestamp_ms < retention.minutes * 60_000
        within_size = retention.size_mb == -1 or kept_bytes + info.size <= size_limit
        if within_time and within_size and (retention.minutes != 0 or retention.size_mb != 0):
            kept_bytes += info.size
            continue
        doomed.append(info.ledger_id)
    doomed.reverse()
    # only a prefix of the log may go (no holes in the middle)
    prefix: list[int] = []
    for info, ledger_id in zip(closed, doomed, strict=False):
        if info.ledger_id != ledger_id:
            break
        prefix.append(ledger_id)
    return prefix
