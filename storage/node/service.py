"""NodeService: wires ledger state, the journal and the entry store of one node.

Owns: start-up (checkpoint + entry logs + journal replay), the add/fence write
path, checkpoints (flush entry logs, persist the mark, trim journals) and
reclaiming deleted ledgers. Everything runs on the event-loop thread: the
loop is the one owner of this state (no locks); threads only do file I/O.
Rules (DESIGN §3):
- an add is answered only after its journal record is fdatasynced; only then
  does it count (LAC, last entry, entry store, readers);
- a fence sets the in-memory flag at once (later normal adds are refused) and
  is answered only after its journal record is durable; by then every add
  queued before it is durable and readable too (the journal is FIFO);
- journal files are deleted only after a checkpoint made their content
  durable elsewhere.
Reads and read-LAC live in ``reads.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import crc32c

from coordination.clock import Clock
from storage import wire
from storage.errors import Status
from storage.node.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from storage.node.entry_store import EntryStore
from storage.node.journal import Journal
from storage.node.journal_core import JournalConfig, JournalCore
from storage.node.journal_io import (
    ROTATE_BYTES,
    TYPE_ADD,
    TYPE_FENCE,
    Buffer,
    Failpoints,
    JournalWriter,
    add_record_head,
    fence_record,
    list_journal_ids,
    replay,
)
from storage.node.ledger_state import LedgerStates
from storage.node.metrics import NodeMetrics
from storage.node.reads import LacWaiters

log = logging.getLogger("folio.storage.node")

_HEAD = wire.ENTRY_HEADER
_HEAD_SIZE = _HEAD.size
_UNPACK_HEAD = _HEAD.unpack_from
_CRC = crc32c.crc32c
_PAYLOAD_MAX = wire.MAX_ENTRY_PAYLOAD_BYTES
_RECOVERY = wire.FLAG_RECOVERY_ADD
_ADD = int(wire.Op.ADD)
_FENCE = int(wire.Op.FENCE)


def _not_started(parts: tuple[Buffer, ...], size: int, cookie: Any) -> bool:
    raise AssertionError("service not started")


class Replier(Protocol):
    """Where an answer goes (a server connection)."""

    def reply(self, op: int, request_id: int, status: Status, body: Buffer = b"") -> None: ...


@dataclass(frozen=True, slots=True)
class NodeConfig:
    data_dir: Path
    journal: JournalConfig = field(default_factory=lambda: JournalConfig(flush_when_queue_empty=True))
    journal_rotate_bytes: int = ROTATE_BYTES
    fsync: bool = True
    entry_log_rotate_bytes: int = 64 * 1024 * 1024
    cache_max_bytes: int = 64 * 1024 * 1024
    checkpoint_interval_s: float = 1.0
    max_lac_waiters: int = 10_000


class NodeService:
    def __init__(self, config: NodeConfig, clock: Clock, metrics: NodeMetrics | None = None) -> None:
        self.config = config
        self.clock = clock
        self.metrics = metrics or NodeMetrics()
        self.ledgers = LedgerStates()
        self.entries = EntryStore(
            config.data_dir / "entrylogs",
            rotate_bytes=config.entry_log_rotate_bytes,
            cache_max_bytes=config.cache_max_bytes,
        )
        self.waiters = LacWaiters(self, config.max_lac_waiters)
        self.metrics.lac_waiters.set_function(lambda: self.waiters.count)
        self.read_only = False
        self._fenced = self.ledgers.fenced
        self._submit = _not_started
        self.ops = 0  # adds + reads answered (for NodeInfo.load)
        self._journal: Journal | None = None
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._last_checkpoint: tuple[tuple[int, int], int] | None = None
        self._checkpoint_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a request's slow part (file reads) as a task the service keeps alive."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        data_dir = self.config.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        checkpoint = load_checkpoint(data_dir)
        if checkpoint is not None:
            for lid, (fenced, lac, last) in checkpoint.ledgers.items():
                self.ledgers.restore(lid, fenced, lac, last)
        self.entries.load(checkpoint.entry_log if checkpoint else None)
        for lid in self.entries.index.ledger_ids():
            self.ledgers.restore(lid, False, -1, self.entries.index.last_entry_id(lid))
        journal_dir = data_dir / "journal"
        replayed = 0
        for record in replay(journal_dir, checkpoint.journal if checkpoint else None):
            if record.rtype == TYPE_ADD:
                ledger_id, entry_id, lac, _ = _HEAD.unpack_from(record.body)
                self.ledgers.on_stored(ledger_id, entry_id, lac)
                self.entries.append(ledger_id, entry_id, bytes(record.body))
            elif record.rtype == TYPE_FENCE:
                self.ledgers.fence(int.from_bytes(record.body[:8], "big"))
            replayed += 1
            if replayed % 1000 == 0:
                self.entries.end_batch()
        self.entries.end_batch()
        existing = list_journal_ids(journal_dir) if journal_dir.exists() else []
        if not self.config.fsync:
            log.warning(
                "!!! UNSAFE: journal fdatasync is OFF (--unsafe-no-fsync); acked adds can be lost !!!"
            )
        writer = JournalWriter(
            journal_dir,
            first_file_id=(max(existing) + 1) if existing else 1,
            rotate_bytes=self.config.journal_rotate_bytes,
            fsync=self.config.fsync,
            failpoints=Failpoints.from_env(),
        )
        self._journal = Journal(
            JournalCore(self.config.journal), writer, self.clock, self._on_durable, self.metrics.on_sync
        )
        self._submit = self._journal.submit
        log.info("storage node started: %d ledgers, %d journal records replayed", len(self.ledgers), replayed)
        await self.checkpoint()
        self._checkpoint_task = asyncio.create_task(self._checkpoint_loop(), name="checkpoint")

    async def stop(self) -> None:
        """Finish syncing what was accepted, checkpoint, close files."""
        if self._checkpoint_task is not None:
            self._checkpoint_task.cancel()
            try:
                await self._checkpoint_task
            except asyncio.CancelledError:
                pass
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
        if len(body) < 1 + _HEAD_SIZE:
            conn.reply(_ADD, request_id, Status.BAD_REQUEST)
            return
        entry = body[1:]
        ledger_id, entry_id, lac, crc = _UNPACK_HEAD(entry)
        status = Status.OK
        if entry_id < 0 or lac < -1 or _CRC(entry[_HEAD_SIZE:], _CRC(entry[:24])) != crc:
            status = Status.BAD_REQUEST
        elif len(entry) - _HEAD_SIZE > _PAYLOAD_MAX:
            status = Status.TOO_LARGE
        elif self.read_only:
            status = Status.READ_ONLY
        elif ledger_id in self._fenced and not body[0] & _RECOVERY:
            status = Status.FENCED
        elif self.entries.overloaded:
            status = Status.UNAVAILABLE
        if status is not Status.OK:
            conn.reply(_ADD, request_id, status)
            return
        head = add_record_head(entry)
        cookie = (conn, request_id, TYPE_ADD, ledger_id, entry_id, lac, entry)
        if not self._submit((head, entry), len(head) + len(entry), cookie):
            self.metrics.rejected.inc()
            conn.reply(_ADD, request_id, Status.UNAVAILABLE)
        elif body[0] & _RECOVERY:
            self.metrics.recovery_adds.inc()

    def fence(self, conn: Replier, request_id: int, ledger_id: int) -> None:
        self.ledgers.fence(ledger_id)
        self.metrics.ledger_fenced.inc()
        record = fence_record(ledger_id)
        cookie = (conn, request_id, TYPE_FENCE, ledger_id)
        if not self.journal.submit((record,), len(record), cookie):
            conn.reply(_FENCE, request_id, Status.UNAVAILABLE)

    def _on_durable(self, cookies: list[Any]) -> None:
        ledgers, entries, waiters = self.ledgers, self.entries, self.waiters
        ledgers_before = len(ledgers)
        append = entries.append
        adds = 0
        nbytes = 0
        ok = Status.OK
        # ledger state is updated once per run of adds to one ledger (same end
        # state as per add: last entry and LAC only grow), before any reply
        run_ledger = -1
        run_last = run_lac = -2
        for cookie in cookies:
            if cookie[2] == TYPE_ADD:
                conn, request_id, _, ledger_id, entry_id, lac, entry = cookie
                if ledger_id != run_ledger:
                    if run_ledger >= 0 and ledgers.on_stored(run_ledger, run_last, run_lac):
                        waiters.lac_advanced(run_ledger)
                    run_ledger, run_last, run_lac = ledger_id, entry_id, lac
                else:
                    if entry_id > run_last:  # noqa: PLR1730 - hot path: no max() call
                        run_last = entry_id
                    if lac > run_lac:  # noqa: PLR1730 - hot path: no max() call
                        run_lac = lac
                append(ledger_id, entry_id, entry)
                conn.reply(_ADD, request_id, ok)
                adds += 1
                nbytes += len(entry)
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
            entries.end_batch()
            self.ops += adds
            self.metrics.on_adds(adds, nbytes, len(ledgers) - ledgers_before)

    # ------------------------------------------------------------ checkpoints

    async def checkpoint(self) -> None:
        """Flush entry logs + index durably, persist the mark, trim old journals."""
        async with self._checkpoint_lock:
            journal = self.journal
            position = journal.durable_position
            state = (position, self.entries.bytes_appended)
            if state == self._last_checkpoint:
                return
            ledgers = self.ledgers.snapshot()
            log_position = await self.entries.flush(sync=True)
            checkpoint = Checkpoint(position, log_position, ledgers)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, save_checkpoint, self.config.data_dir, checkpoint)
            await loop.run_in_executor(None, journal.delete_files_before, position[0])
            self._last_checkpoint = state

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.checkpoint_interval_s)
            await self.checkpoint()
            dead = self.entries.reclaimable_logs()
            if dead:
                await self.entries.reclaim(dead)

    # ------------------------------------------------------------ reclaim

    async def delete_ledger(self, ledger_id: int) -> None:
        """The ledger is gone from etcd: forget it and reclaim dead entry logs."""
        known = ledger_id in self.ledgers or self.entries.index.has_ledger(ledger_id)
        self.ledgers.delete(ledger_id)
        dead = self.entries.delete_ledger(ledger_id)
        if known:
            self.metrics.ledger_deleted.inc()
            log.info("ledger %d deleted: dropped from the index", ledger_id)
        if dead:
            await self.entries.reclaim(dead)

    def local_ledger_ids(self) -> set[int]:
        return set(self.ledgers.ledger_ids()) | set(self.entries.index.ledger_ids())
