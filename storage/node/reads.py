"""Read side of a node: READ, READ_RANGE and READ_LAC (with long-poll waiters).

Owns: the bounded set of read-LAC long-poll waiters (over the node's
``LedgerStates``), the read handlers (they take their node as a ``ReadPort``:
only what they use of it) and ``Replier``, where any answer of the node goes.
Rules (docs/compatibility.md §6.2):
- only durable entries are visible (the entry store indexes nothing else);
- entries are pread from the journal files on the read pool (recent ones come
  from the page cache);
- a range read returns contiguous entries from ``first`` until one is missing,
  ``last`` is passed or ``max_bytes`` would be exceeded, and at least one;
- every entry read back from a journal file has its crc32c verified; a corrupt
  one is never served (UNAVAILABLE, so readers use another replica);
- a long-poll waits until the ledger's LAC passes ``previous_lac`` or
  ``timeout_ms`` passes (then TIMEOUT with the current LAC); at most
  ``max_waiters`` wait at once, further polls are answered TIMEOUT at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from time import perf_counter
from typing import Any, Protocol

from storage import wire
from storage.errors import ProtocolViolation, Status
from storage.node.entry_store import EntryStore
from storage.node.journal_io import Buffer
from storage.node.ledger_state import LedgerStates
from storage.node.metrics import NodeMetrics

log = logging.getLogger("folio.storage.reads")

LONG_POLL_MS_MAX = 60_000
RANGE_ENTRIES_MAX = 65_536
_READ = int(wire.Op.READ)
_RANGE = int(wire.Op.READ_RANGE)
_LAC = int(wire.Op.READ_LAC)


class Replier(Protocol):
    """Where an answer goes (a server connection)."""

    def reply(self, op: int, request_id: int, status: Status, body: Buffer = b"") -> None: ...


Waiter = tuple[Replier, int, int, asyncio.TimerHandle]  # conn, request id, previous lac, timer


class LacWaiters:
    def __init__(self, ledgers: LedgerStates, max_waiters: int) -> None:
        self._ledgers = ledgers
        self.max_waiters = max_waiters
        self._by_ledger: dict[int, list[Waiter]] = {}
        self.count = 0

    def wait(self, conn: Replier, request_id: int, ledger_id: int, previous: int, timeout_ms: int) -> bool:
        """Park a long-poll; False when the waiter bound is reached."""
        if self.count >= self.max_waiters:
            return False
        loop = asyncio.get_running_loop()
        timer = loop.call_later(
            min(timeout_ms, LONG_POLL_MS_MAX) / 1000, self._expire, conn, request_id, ledger_id
        )
        self._by_ledger.setdefault(ledger_id, []).append((conn, request_id, previous, timer))
        self.count += 1
        return True

    def lac_advanced(self, ledger_id: int) -> None:
        waiting = self._by_ledger.get(ledger_id)
        if not waiting:
            return
        reply = self._ledgers.lac_reply(ledger_id)
        assert reply is not None
        keep: list[Waiter] = []
        for waiter in waiting:
            conn, request_id, previous, timer = waiter
            if reply[0] > previous:
                timer.cancel()
                self.count -= 1
                conn.reply(_LAC, request_id, Status.OK, wire.lac_reply(*reply))
            else:
                keep.append(waiter)
        if keep:
            self._by_ledger[ledger_id] = keep
        else:
            del self._by_ledger[ledger_id]

    def _expire(self, conn: Replier, request_id: int, ledger_id: int) -> None:
        waiting = self._by_ledger.get(ledger_id, [])
        for i, waiter in enumerate(waiting):
            if waiter[0] is conn and waiter[1] == request_id:
                del waiting[i]
                self.count -= 1
                break
        else:
            return
        if not waiting:
            self._by_ledger.pop(ledger_id, None)
        reply = self._ledgers.lac_reply(ledger_id)
        if reply is None:
            conn.reply(_LAC, request_id, Status.NO_SUCH_LEDGER)
        else:
            conn.reply(_LAC, request_id, Status.TIMEOUT, wire.lac_reply(*reply))

    def drop_connection(self, conn: Replier) -> None:
        for ledger_id in list(self._by_ledger):
            waiting = self._by_ledger[ledger_id]
            keep = [w for w in waiting if w[0] is not conn]
            for w in waiting:
                if w[0] is conn:
                    w[3].cancel()
                    self.count -= 1
            if keep:
                self._by_ledger[ledger_id] = keep
            else:
                del self._by_ledger[ledger_id]

    def close(self) -> None:
        for waiting in self._by_ledger.values():
            for conn, request_id, _, timer in waiting:
                timer.cancel()
                conn.reply(_LAC, request_id, Status.UNAVAILABLE)
        self._by_ledger.clear()
        self.count = 0


class ReadPort(Protocol):
    """What the read handlers use of their node (``NodeService`` is one)."""

    ledgers: LedgerStates
    entries: EntryStore
    metrics: NodeMetrics
    waiters: LacWaiters
    ops: int  # adds + reads answered

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...


def read_lac(service: ReadPort, conn: Replier, request_id: int, body: bytes) -> None:
    ledger_id, previous, timeout_ms = wire.parse_read_lac(body)
    reply = service.ledgers.lac_reply(ledger_id)
    if timeout_ms <= 0 or (reply is not None and reply[0] > previous):
        if reply is None:
            conn.reply(_LAC, request_id, Status.NO_SUCH_LEDGER)
        else:
            conn.reply(_LAC, request_id, Status.OK, wire.lac_reply(*reply))
        return
    if not service.waiters.wait(conn, request_id, ledger_id, previous, timeout_ms):
        lac, last = reply if reply is not None else (-1, -1)
        conn.reply(_LAC, request_id, Status.TIMEOUT, wire.lac_reply(lac, last))


def _missing(service: ReadPort, ledger_id: int) -> Status:
    known = ledger_id in service.ledgers or service.entries.index.has_ledger(ledger_id)
    return Status.NO_SUCH_ENTRY if known else Status.NO_SUCH_LEDGER


def _answered(service: ReadPort, started: float) -> None:
    service.metrics.read_seconds.observe(perf_counter() - started)


def read(service: ReadPort, conn: Replier, request_id: int, body: bytes) -> None:
    started = perf_counter()
    ledger_id, entry_id = wire.parse_ledger_entry(body)
    service.ops += 1
    service.metrics.reads.inc()
    location = service.entries.locate(ledger_id, entry_id)
    if location is None:
        conn.reply(_READ, request_id, _missing(service, ledger_id))
        _answered(service, started)
        return
    service.spawn(_read_files(service, conn, request_id, [location], started=started))


def read_range(service: ReadPort, conn: Replier, request_id: int, body: bytes) -> None:
    started = perf_counter()
    ledger_id, first, last, max_bytes = wire.parse_range(body)
    service.ops += 1
    service.metrics.reads.inc()
    locate = service.entries.locate
    locations: list[tuple[int, int, int]] = []
    size = 0
    for entry_id in range(first, min(last, first + RANGE_ENTRIES_MAX - 1) + 1):
        location = locate(ledger_id, entry_id)
        if location is None:
            break
        length = location[2]
        if locations and size + length > max_bytes:
            break
        size += length
        locations.append(location)
    if not locations:
        conn.reply(_RANGE, request_id, _missing(service, ledger_id))
        _answered(service, started)
    else:
        service.spawn(_read_files(service, conn, request_id, locations, ranged=True, started=started))


async def _read_files(
    service: ReadPort,
    conn: Replier,
    request_id: int,
    locations: list[tuple[int, int, int]],
    ranged: bool = False,
    started: float = 0.0,
) -> None:
    op = _RANGE if ranged else _READ
    try:
        datas = await service.entries.read_files(locations)
    except OSError as exc:
        log.error("journal read failed: %r", exc)
        conn.reply(op, request_id, Status.UNAVAILABLE)
        return
    good: list[Buffer] = []
    for data in datas:
        if not wire.verify_entry(data):
            log.error("corrupt entry in a journal file (crc mismatch); not serving it")
            break
        good.append(data)
    if not good:
        conn.reply(op, request_id, Status.UNAVAILABLE)
    elif ranged:
        conn.reply(op, request_id, Status.OK, wire.encode_entries(good))  # type: ignore[arg-type]
    else:
        conn.reply(op, request_id, Status.OK, good[0])
    if started:
        _answered(service, started)


def dispatch_read(service: ReadPort, conn: Replier, op: int, request_id: int, body: bytes) -> None:
    """READ / READ_RANGE / READ_LAC; a malformed body gets BAD_REQUEST."""
    try:
        if op == _READ:
            read(service, conn, request_id, body)
        elif op == _RANGE:
            read_range(service, conn, request_id, body)
        else:
            read_lac(service, conn, request_id, body)
    except ProtocolViolation:
        conn.reply(op, request_id, Status.BAD_REQUEST)
