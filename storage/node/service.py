"""NodeService: wires ledger state, the journal and the entry store of one node.

Owns: start-up (checkpoint + index files + journal replay), the add/fence write
path, checkpoints (index files of sealed journal files, then the mark and ledger
states) and reclaiming journal files of deleted ledgers. Everything runs on the event-loop thread: the
loop is the one owner of this state (no locks); threads only do file I/O, all of
it through the ``Disk`` port the service is given (storage/ports.py).
Rules (docs/architecture.md §3):
- an add is answered only after its journal record is fdatasynced; only then
  does it count (LAC, last entry, entry store, readers);
- a fence sets the in-memory flag at once (later normal adds are refused) and
  is answered only after its journal record is durable; by then every add
  queued before it is durable and readable too (the journal is FIFO);
- a deletion tombstones the ledger at once (every later add is refused, a
  normal one as fenced: ledger_state.py), journals a DELETE record and, once
  that is durable, drops the ledger's entries; an add queued before the
  deletion and durable after it is answered FENCED and not indexed. The
  tombstone is in every later checkpoint, so it outlives reclaim and compaction;
- the journal files are the entries' only copy (the index points into them):
  a checkpoint never deletes them; only reclaim does (entry_store.py).
Reads and read-LAC live in ``reads.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordination.clock import Clock
from storage import wire
from storage.errors import BadRequest, Status
from storage.node.checkpoint import CheckpointRows, load_checkpoint, save_checkpoint
from storage.node.compaction import (
    COMPACTION_BYTES_PER_ROUND,
    COMPACTION_INTERVAL_S,
    COMPACTION_THRESHOLD,
    RELOCATE,
    Compactor,
)
from storage.node.drop_behind import DROP_LAG_BYTES
from storage.node.entry_store import EntryStore
from storage.node.journal import INLINE_SYNC_RECORDS, Journal
from storage.node.journal_core import JournalConfig, JournalCore
from storage.node.journal_io import (
    HEAD,
    MAGIC,
    PREALLOC_BYTES,
    ROTATE_BYTES,
    TYPE_ADD,
    TYPE_DELETE,
    TYPE_FENCE,
    Buffer,
    Failpoints,
    JournalWriter,
    add_record_head,
    cut_tail,
    delete_record,
    fence_record,
    list_journal_ids,
    record_ledger_id,
    replay,
)
from storage.node.ledger_state import LedgerStates
from storage.node.metrics import NodeMetrics
from storage.node.reads import LacWaiters, Replier
from storage.ports import OS_DISK, Disk

log = logging.getLogger("folio.storage.node")

_parse_add = wire.parse_add
_ENTRY_MAX = wire.ENTRY_BYTES_MAX
_ADD = int(wire.Op.ADD)
_FENCE = int(wire.Op.FENCE)
_FENCED = Status.FENCED
_DELETE_DONE = RELOCATE + 1  # the durable-callback kind of a DELETE record
_RECORD_HEAD = HEAD.size  # an ADD's wire entry starts this far into its record
_OFFSET_LIMIT = 1 << 32  # a location keeps the offset in its low 32 bits


def _not_started(parts: tuple[Buffer, ...], size: int, cookie: Any) -> bool:
    raise AssertionError("service not started")


@dataclass(frozen=True, slots=True)
class NodeConfig:
    data_dir: Path
    journal: JournalConfig = field(default_factory=lambda: JournalConfig(flush_when_queue_empty=True))
    journal_rotate_bytes: int = ROTATE_BYTES
    journal_cache_bytes: int | None = DROP_LAG_BYTES  # None: journal pages stay cached
    journal_prealloc_bytes: int = PREALLOC_BYTES  # 0: journal files grow with each write
    fsync: bool = True
    unsafe_no_fencing: bool = False  # control tests only: a fenced ledger still takes normal adds
    unsafe_forget_fence_on_delete: bool = False  # control tests only: a deleted ledger takes adds again
    checkpoint_interval_s: float = 1.0
    max_lac_waiters: int = 10_000
    compaction_threshold: float = COMPACTION_THRESHOLD  # 0: no compaction
    compaction_interval_s: float = COMPACTION_INTERVAL_S
    compaction_bytes_per_round: int = COMPACTION_BYTES_PER_ROUND
    journal_inline_sync_records: int = INLINE_SYNC_RECORDS  # 0: every fdatasync on the sync thread

    def __post_init__(self) -> None:
        # a group is written whole into one file, then the file may rotate
        if self.journal_rotate_bytes + self.journal.max_queued_bytes >= _OFFSET_LIMIT:
            raise ValueError("journal rotate bytes + journal queue bytes must stay below 4 GiB")


class NodeService:
    def __init__(
        self, config: NodeConfig, clock: Clock, metrics: NodeMetrics | None = None, disk: Disk = OS_DISK
    ) -> None:
        self.config = config
        self.clock = clock
        self.disk = disk
        self.metrics = metrics or NodeMetrics()
        self.ledgers = LedgerStates()
        self.entries = EntryStore(config.data_dir / "journal", disk)
        self.waiters = LacWaiters(self.ledgers, config.max_lac_waiters)
        self.metrics.lac_waiters.set_function(lambda: self.waiters.count)
        self.read_only = False
        # the add path's views of fenced and deleted ledgers; the control tests' unsafe
        # switches empty them (a node that forgets its fences, as a control that must lose)
        self._fenced: set[int] = set() if config.unsafe_no_fencing else self.ledgers.fenced
        self._deleted = self.ledgers.deleted
        self._refuse_deleted = not config.unsafe_forget_fence_on_delete
        self._known = self.ledgers.held
        self._submit = _not_started
        self.ops = 0  # adds + reads answered (for NodeInfo.load)
        self._journal: Journal | None = None
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._compaction_task: asyncio.Task[None] | None = None
        self.compactor = Compactor(self, config.compaction_threshold, config.compaction_bytes_per_round)
        self._last_checkpoint: tuple[int, int] | None = None
        self._unjournaled_deletes = False  # tombstones only the next checkpoint will make durable
        self._checkpoint_lock = asyncio.Lock()
        self._rows = CheckpointRows()  # the ledger rows of the next checkpoint, kept by change
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a request's slow part (file reads) as a task the service keeps alive."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        data_dir = self.config.data_dir
        disk = self.disk
        disk.makedirs(data_dir)
        checkpoint = load_checkpoint(data_dir, disk)  # refuses a data dir of the old format
        mark = checkpoint.journal if checkpoint is not None else (0, 0)
        if checkpoint is not None:
            for first, last_id in checkpoint.deleted:
                self._deleted.add_range(first, last_id)
            for lid, (fenced, lac, last) in checkpoint.ledgers.items():
                self.ledgers.restore(lid, fenced, lac, last)
        journal_dir = data_dir / "journal"
        disk.makedirs(journal_dir)
        self.entries.load_sealed(mark[0])
        replayed = 0
        put = self.entries.put_replayed  # a newer copy of an entry: the older one is dead
        # the mark's file and later ones: every ADD is indexed where it lies; ledger
        # state changes only from records after the mark (earlier ones are in checkpoint.json)
        ends: dict[int, int] = {}  # where each replayed file's valid records end
        for record in replay(journal_dir, mark[0], disk):
            ends[record.file_id] = record.end_offset
            after = (record.file_id, record.end_offset) > mark
            if record.rtype == TYPE_ADD:
                ledger_id, entry_id, lac = wire.entry_header(record.body)
                put(ledger_id, entry_id, record.file_id << 32 | record.body_offset, len(record.body))
                if after:
                    self.ledgers.on_stored(ledger_id, entry_id, lac)
            elif record.rtype == TYPE_FENCE and after:
                self.ledgers.fence(record_ledger_id(record.body))
            elif record.rtype == TYPE_DELETE and after:
                self.ledgers.delete(record_ledger_id(record.body))
            replayed += after
        for lid in self.entries.index.ledger_ids():
            if lid in self._deleted:  # entries of a deleted ledger whose files are not reclaimed yet
                self.entries.delete_ledger(lid)
            else:
                self.ledgers.restore(lid, False, -1, self.entries.index.last_entry_id(lid))
        existing = list_journal_ids(journal_dir, disk)
        for file_id in existing:
            if file_id >= mark[0]:  # never appended to again: its preallocated zeros or torn tail go
                cut_tail(journal_dir, file_id, ends.get(file_id, len(MAGIC)), disk)
        if not self.config.fsync:
            log.warning(
                "!!! UNSAFE: journal fdatasync is OFF (--unsafe-no-fsync); acked adds can be lost !!!"
            )
        writer = JournalWriter(
            journal_dir,
            first_file_id=max([*existing, mark[0]]) + 1,  # never an old file, never behind the mark
            rotate_bytes=self.config.journal_rotate_bytes,
            fsync=self.config.fsync,
            failpoints=Failpoints.from_env(),
            cache_bytes=self.config.journal_cache_bytes,
            prealloc_bytes=self.config.journal_prealloc_bytes,
            disk=disk,
        )
        self._journal = Journal(
            JournalCore(self.config.journal),
            writer,
            self.clock,
            self._on_durable,
            self.metrics.on_sync,
            inline_sync_records=self.config.journal_inline_sync_records,
        )
        self._submit = self._journal.submit
        log.info("storage node started: %d ledgers, %d journal records replayed", len(self.ledgers), replayed)
        await self.checkpoint()
        self._checkpoint_task = asyncio.create_task(self._checkpoint_loop(), name="checkpoint")
        if self.config.compaction_threshold > 0:
            self._compaction_task = asyncio.create_task(self._compaction_loop(), name="compaction")

    async def stop(self) -> None:
        """Finish syncing what was accepted, checkpoint, close files."""
        for task in (self._compaction_task, self._checkpoint_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.waiters.close()
        if self._journal is not None:
            await self._journal.drain()
            await self.checkpoint()
            self._journal.close()
        self.entries.close()

    @property
    def journal(self) -> Journal:
        assert self._journal is not None, "service not started"
        return self._journal

    # ------------------------------------------------------------ writes

    def add(self, conn: Replier, request_id: int, body: memoryview) -> None:
        """The hot path: verify, check, queue for the journal. No copies of the entry."""
        try:
            recovery, ledger_id, entry_id, lac, entry = _parse_add(body)
        except BadRequest:  # too short, or fails its crc32c
            conn.reply(_ADD, request_id, Status.BAD_REQUEST)
            return
        status = Status.OK
        if entry_id < 0 or lac < -1:
            status = Status.BAD_REQUEST
        elif len(entry) > _ENTRY_MAX:
            status = Status.TOO_LARGE
        elif self.read_only:
            status = Status.READ_ONLY
        elif ledger_id in self._fenced and not recovery:
            status = Status.FENCED
        elif ledger_id not in self._known and ledger_id in self._deleted and self._refuse_deleted:
            status = self.ledgers.check_add(ledger_id, recovery)
        if status is not Status.OK:
            conn.reply(_ADD, request_id, status)
            return
        head = add_record_head(entry)
        cookie = (conn, request_id, TYPE_ADD, ledger_id, entry_id, lac, entry)
        if not self._submit((head, entry), len(head) + len(entry), cookie):
            self.metrics.rejected.inc()
            conn.reply(_ADD, request_id, Status.UNAVAILABLE)
        elif recovery:
            self.metrics.recovery_adds.inc()

    def fence(self, conn: Replier, request_id: int, ledger_id: int) -> None:
        self.ledgers.fence(ledger_id)
        self.metrics.ledger_fenced.inc()
        record = fence_record(ledger_id)
        cookie = (conn, request_id, TYPE_FENCE, ledger_id)
        if not self.journal.submit((record,), len(record), cookie):
            conn.reply(_FENCE, request_id, Status.UNAVAILABLE)

    def _on_durable(self, cookies: list[Any], locations: list[int]) -> None:
        ledgers, waiters = self.ledgers, self.waiters
        ledgers_before = len(ledgers)
        put = self.entries.put
        adds = 0
        nbytes = 0
        ok = Status.OK
        # ledger state is updated once per run of adds to one ledger (same end
        # state as per add: last entry and LAC only grow), before any reply
        run_ledger = -1
        run_last = run_lac = -2
        run_status = ok
        deleted = self._deleted if self._refuse_deleted else None
        for cookie, location in zip(cookies, locations, strict=True):
            if cookie[2] == TYPE_ADD:
                conn, request_id, _, ledger_id, entry_id, lac, entry = cookie
                if ledger_id != run_ledger:
                    if run_ledger >= 0 and ledgers.on_stored(run_ledger, run_last, run_lac):
                        waiters.lac_advanced(run_ledger)
                    run_ledger, run_last, run_lac = ledger_id, entry_id, lac
                    # deleted while its add waited for the sync: not kept, not acknowledged
                    run_status = _FENCED if deleted and ledger_id in deleted else ok
                    if run_status is not ok:
                        conn.reply(_ADD, request_id, run_status)
                        continue
                elif run_status is not ok:
                    conn.reply(_ADD, request_id, run_status)
                    continue
                else:
                    if entry_id > run_last:  # noqa: PLR1730 - hot path: no max() call
                        run_last = entry_id
                    if lac > run_lac:  # noqa: PLR1730 - hot path: no max() call
                        run_lac = lac
                length = len(entry)
                put(ledger_id, entry_id, location + _RECORD_HEAD, length)
                conn.reply(_ADD, request_id, ok)
                adds += 1
                nbytes += length
            elif cookie[2] == RELOCATE:  # a compaction copy: the index moves to it
                cookie[0](location + _RECORD_HEAD)
            elif cookie[2] == _DELETE_DONE:
                cookie[0].set_result(None)
            else:
                if run_ledger >= 0 and ledgers.on_stored(run_ledger, run_last, run_lac):
                    waiters.lac_advanced(run_ledger)
                run_ledger = -1
                conn, request_id, ledger_id = cookie[0], cookie[1], cookie[3]
                lac, last = ledgers.lac_reply(ledger_id) or (-1, -1)
                conn.reply(_FENCE, request_id, ok, wire.lac_reply(lac, last))
        if run_ledger >= 0 and ledgers.on_stored(run_ledger, run_last, run_lac):
            waiters.lac_advanced(run_ledger)
        if adds:
            self.ops += adds
            self.metrics.on_adds(adds, nbytes, len(ledgers) - ledgers_before)

    # ------------------------------------------------------------ checkpoints

    async def checkpoint(self) -> None:
        """Index files of sealed journal files, then the mark + ledger states, durably.
        Deletes nothing: the journal files are the data (reclaim deletes dead ones)."""
        async with self._checkpoint_lock:
            journal = self.journal
            position = journal.durable_position  # with the snapshot: no await in between
            if position == self._last_checkpoint and not self._unjournaled_deletes:
                return
            self._unjournaled_deletes = False
            self._rows.apply(self.ledgers.take_changes())
            checkpoint = self._rows.checkpoint_json(position, self._deleted.ranges())
            await self.entries.write_index_files(position[0])
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, save_checkpoint, self.config.data_dir, checkpoint, self.disk)
            self.entries.checkpointed(position[0])
            self._last_checkpoint = position

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.checkpoint_interval_s)
            await self.checkpoint()
            dead = self.entries.reclaimable_files()
            if dead:
                await self.entries.reclaim(dead)

    async def _compaction_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.compaction_interval_s)
            try:
                await self.compact()
            except Exception:  # e.g. a file reclaimed under a round: the next round starts afresh
                log.exception("journal compaction round failed; trying again next round")

    async def compact(self) -> int:
        """One compaction round, then reclaim what it freed; the bytes copied. Nothing
        while the node is read-only: its disk is nearly full, and the copies come
        before the space they free (BookKeeper, too, stops compacting then)."""
        if self.read_only:
            return 0
        copied = await self.compactor.run_round()
        dead = self.entries.reclaimable_files()
        if dead:
            await self.entries.reclaim(dead)
        return copied

    # ------------------------------------------------------------ reclaim

    async def delete_ledger(self, ledger_id: int) -> None:
        """The ledger is gone from etcd: tombstone it (durably: a journal record, then
        every checkpoint), forget its entries and reclaim dead journal files."""
        known = ledger_id in self.ledgers or self.entries.index.has_ledger(ledger_id)
        tombstoned = ledger_id in self._deleted  # a watch event and a listing may both report it
        self.ledgers.delete(ledger_id)  # refuses adds from now on
        if known or not tombstoned:
            record = delete_record(ledger_id)
            durable: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self.journal.submit((record,), len(record), (durable, None, _DELETE_DONE, ledger_id)):
                await durable
            else:  # the journal is full: the next checkpoint carries the tombstone
                self._unjournaled_deletes = True
        dead = self.entries.delete_ledger(ledger_id)
        if not tombstoned:
            self.metrics.ledger_deleted.inc()
        if known:
            log.info("ledger %d deleted: dropped from the index, tombstoned", ledger_id)
        if dead:
            await self.entries.reclaim(dead)

    def local_ledger_ids(self) -> set[int]:
        return set(self.ledgers.ledger_ids()) | set(self.entries.index.ledger_ids())
