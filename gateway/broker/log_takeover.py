"""What a new owner does with the ledgers of a log it takes over (asyncio shell).

Owns: ``recover_ledger(s)`` (a ledger of the list, fenced and closed with
recovery if its old writer did not close it; empty ones are deleted) and
``Recount``/``recount``, the one background task per opened log that reads the
ledgers whose message total the ledger list does not record, feeds each
entry's message count (from the entry header) to the log's ``MessageCounts``,
then records the total in the list.

Rules (docs/architecture.md §3, §4; docs/decisions/0004): a ledger that is not CLOSED is
opened with recovery, which fences its old writer at the storage nodes; an
empty one is dropped. Users count messages, and Folio packs many messages into
one entry. An owner that closes a ledger writes its total into the list; an
owner that dies cannot, so the next owner knows that ledger only in entries
(``LedgerInfo.messages == 0``) and would count one message per entry. Until the
recount of a ledger ends its counts stay estimates; afterwards they are exact
and survive the next ownership change. Reads go to the storage nodes in chunks
of ``CHUNK_ENTRIES`` entries, one chunk at a time, and never fill the entry
cache; the task stops when the log closes or is fenced, and gives a ledger up
after ``ATTEMPTS_MAX`` failed reads. Bounded, because a gateway that takes over
from a dead one may have to recount a ledger of every topic it inherits at once:
at most ``RECOUNTS_AT_ONCE`` logs recount at a time per gateway (event loop), and
each paces its reads to ``RECOUNT_BYTES_PER_S`` (a pause after each chunk), so
recounts never take more than 16 MiB/s of the storage nodes from live traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import Protocol

from coordination.clock import Clock
from gateway.broker.message_counts import MessageCounts
from gateway.errors import GatewayError
from storage.client.api import LedgerClient
from storage.errors import StorageError
from storage.formats.entry_format import entry_message_count
from storage.formats.errors import FormatError
from storage.formats.log_record import LedgerInfo
from storage.formats.positions import Position
from storage.types import LedgerState

log = logging.getLogger(__name__)

CHUNK_ENTRIES = 1000  # entries read per call (the log's READ_ENTRIES_MAX)
ATTEMPTS_MAX = 5  # failed reads of one ledger before its counts stay estimated
RETRY_DELAY_S = 0.5
RECOUNTS_AT_ONCE = 2  # logs recounting at the same time, per gateway
RECOUNT_BYTES_PER_S = 8 * 1024 * 1024  # read rate of one recount

_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
active = 0  # logs recounting now (tests, diagnostics)


def _gate() -> asyncio.Semaphore:
    """The gateway's recount slots (one set per event loop: tests run several loops)."""
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(RECOUNTS_AT_ONCE)
    return gate


async def recover_ledger(client: LedgerClient, clock: Clock, info: LedgerInfo) -> LedgerInfo | None:
    """The ledger's final info (fenced and closed if it was not); None if empty.
    ``messages`` is 0 (unknown) unless the list recorded the total of exactly these entries."""
    try:
        metadata = await client.metadata.read(info.ledger_id)
    except StorageError:
        return info if info.entries > 0 else None  # deleted underneath: keep what the list says
    if metadata.state is not LedgerState.CLOSED:
        reader = await client.open(info.ledger_id, recover=True)
        metadata = reader.metadata
        await reader.close()
    entries = metadata.last_entry_id + 1
    if entries <= 0:
        return None
    return LedgerInfo(
        info.ledger_id,
        entries,
        metadata.length,
        info.timestamp_ms or clock.now_ms(),
        info.messages if info.entries == entries else 0,
    )


async def recover_ledgers(client: LedgerClient, clock: Clock, ledgers: list[LedgerInfo]) -> list[LedgerInfo]:
    """``recover_ledger`` of each ledger of the list, in order; empty ones are left out."""
    recovered = []
    for info in ledgers:
        final = await recover_ledger(client, clock, info)
        if final is not None:
            recovered.append(final)
    return recovered


async def delete_dropped(client: LedgerClient, ledgers: list[LedgerInfo], kept: list[LedgerInfo]) -> None:
    """Delete the ledgers recovery found empty (already left out of the new list)."""
    kept_ids = {info.ledger_id for info in kept}
    for dropped in (info for info in ledgers if info.ledger_id not in kept_ids):
        with contextlib.suppress(StorageError):
            await client.delete(dropped.ledger_id)


class RecountedLog(Protocol):
    """What a recount needs of the log whose ledgers it counts (a ``ManagedLog``)."""

    @property
    def topic_path(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    @property
    def fenced(self) -> bool: ...

    @property
    def ledgers(self) -> list[LedgerInfo]: ...

    @property
    def counts(self) -> MessageCounts: ...

    async def read(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]: ...

    async def record_total(self, ledger_id: int) -> None: ...


class Recount:
    """The one background recount task of a log (none if nothing needs counting)."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def start(self, managed: RecountedLog, ledger_ids: list[int]) -> None:
        if ledger_ids:
            self._task = asyncio.create_task(recount(managed, ledger_ids))

    @property
    def running(self) -> bool:
        """Running, or waiting for one of the gateway's recount slots."""
        return self._task is not None and not self._task.done()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


async def recount(managed: RecountedLog, ledger_ids: list[int]) -> None:
    """Count the messages of ``ledger_ids`` (closed ledgers of ``managed``) entry by
    entry and record each total in the ledger list (in one of the gateway's recount
    slots: waits for one)."""
    global active
    async with _gate():
        active += 1
        try:
            await _recount(managed, ledger_ids)
        finally:
            active -= 1


async def _recount(managed: RecountedLog, ledger_ids: list[int]) -> None:
    for ledger_id in ledger_ids:
        if not await _count_ledger(managed, ledger_id):
            continue  # given up (or the log closed: checked next)
        if managed.closed or managed.fenced:
            return
        try:
            await managed.record_total(ledger_id)
        except (GatewayError, StorageError) as exc:
            log.info("topic %s: recording the total of ledger %d: %s", managed.topic_path, ledger_id, exc)
            return


async def _count_ledger(managed: RecountedLog, ledger_id: int) -> bool:
    """True once every entry of the ledger is counted."""
    entries = next((info.entries for info in managed.ledgers if info.ledger_id == ledger_id), 0)
    next_entry, failures = 0, 0
    while next_entry < entries:
        if managed.closed or managed.fenced:
            return False
        try:
            got = await managed.read(Position(ledger_id, next_entry), CHUNK_ENTRIES)
        except StorageError as exc:
            failures += 1
            if failures >= ATTEMPTS_MAX:
                log.warning("topic %s: cannot recount ledger %d: %s", managed.topic_path, ledger_id, exc)
                return False
            await asyncio.sleep(RETRY_DELAY_S)
            continue
        if not got or got[0][0] != Position(ledger_id, next_entry):
            return False  # trimmed meanwhile
        for position, payload in got:
            try:
                count = entry_message_count(payload)
            except FormatError as exc:
                log.warning("topic %s: entry %s: %s", managed.topic_path, position, exc)
                return False
            managed.counts.on_entry(ledger_id, position.entry_id, count)
        next_entry = got[-1][0].entry_id + 1
        await asyncio.sleep(sum(len(payload) for _, payload in got) / RECOUNT_BYTES_PER_S)
    return True
