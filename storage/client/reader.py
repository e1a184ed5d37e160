"""LedgerReader: reads entries of one ledger from its storage nodes.

Owns: a reader's view of one ledger (metadata + the LAC it knows) and the
asyncio driving of ``read_core``. Rules (read_core.py): replicas in write-set
order with speculative reads; every entry checked (crc32c, ids) before it is
returned; never past LAC on an OPEN ledger nor past ``last_entry_id`` on a
CLOSED one. Catch-up reads use READ_RANGE where one node holds the whole range
(Qw == E), else pipelined single reads, at most ``READ_WINDOW`` in flight; a
range read may be bounded in bytes (it then returns a prefix of the range).
If a read of an OPEN ledger finds nothing, the metadata is re-read once (an
ensemble change may have moved the entry to a new segment).
"""

from __future__ import annotations

import asyncio
import contextlib

from coordination.clock import Clock
from storage import wire
from storage.client.metadata import LedgerMetadataStore
from storage.client.pool import ConnectionPool
from storage.client.read_core import (
    SPECULATIVE_READ_MS,
    EntryFound,
    EntryReadCore,
    LacPoll,
    ReadEffect,
    ReadFailed,
    ReadFrom,
    check_readable,
    plan_range,
    read_bound,
    verify,
)
from storage.errors import NodeUnavailable, NoSuchEntry, ProtocolViolation, Status
from storage.types import LedgerMetadata, LedgerState, NodeId

READ_WINDOW = 256  # single-entry reads in flight during a range read
READ_TIMEOUT_MS = 10_000  # a read that no replica answers fails after this
RANGE_TIMEOUT_MS = 3_000  # a range read not answered by then goes to the next replica
LAC_POLL_MARGIN_MS = 2_000  # extra wait for a long-poll reply beyond its timeout
FIRST_BOUNDED_WINDOW = 8  # single reads of a byte-bounded range before any entry size is known


def _payload_bytes(entries: list[wire.Entry]) -> int:
    return sum([len(entry.payload) for entry in entries])


class LedgerReader:
    def __init__(
        self,
        metadata: LedgerMetadata,
        metadata_store: LedgerMetadataStore,
        pool: ConnectionPool,
        clock: Clock,
        lac: int = -1,
        speculative_ms: int = SPECULATIVE_READ_MS,
    ) -> None:
        self.metadata = metadata
        self._meta = metadata_store
        self._pool = pool
        self._clock = clock
        self._lac = lac
        self._speculative_ms = speculative_ms
        self._loop = asyncio.get_running_loop()

    @property
    def ledger_id(self) -> int:
        return self.metadata.ledger_id

    @property
    def closed(self) -> bool:
        return self.metadata.state is LedgerState.CLOSED

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry this reader may return right now."""
        return read_bound(self.metadata, self._lac)

    async def refresh(self) -> LedgerMetadata:
        self.metadata = await self._meta.read(self.ledger_id)
        return self.metadata

    # ------------------------------------------------------------ single entries

    async def read(self, entry_id: int) -> bytes:
        """The payload of one entry."""
        return (await self.read_entry(entry_id)).payload

    async def read_entry(self, entry_id: int) -> wire.Entry:
        await self._ensure_readable(entry_id, entry_id)
        try:
            return await self._read_one(entry_id)
        except (NoSuchEntry, NodeUnavailable):
            if self.closed:
                raise
            await self.refresh()
            return await self._read_one(entry_id)

    async def _ensure_readable(self, first: int, last: int) -> None:
        if last > self.last_add_confirmed and not self.closed:
            await self.read_lac()
            if last > self.last_add_confirmed and not self.closed:
                await self.refresh()
        check_readable(self.metadata, self._lac, first, last)

    async def _read_one(self, entry_id: int) -> wire.Entry:
        core = EntryReadCore(
            self.ledger_id, entry_id, self.metadata.write_set(entry_id), self._speculative_ms
        )
        done: asyncio.Future[wire.Entry] = self._loop.create_future()
        body = wire.ledger_entry_body(self.ledger_id, entry_id)

        def on_reply(node: NodeId, token: object, status: Status, data: bytes) -> None:
            run(core.on_response(node, status, data, self._clock.now_ms()))

        def run(effects: list[ReadEffect]) -> None:
            for effect in effects:
                if isinstance(effect, ReadFrom):
                    self._pool.get(effect.node).send(wire.Op.READ, body, on_reply, None)
                elif isinstance(effect, EntryFound):
                    if not done.done():
                        done.set_result(effect.entry)
                elif isinstance(effect, ReadFailed) and not done.done():
                    done.set_exception(effect.error)

        run(core.start(self._clock.now_ms()))
        give_up = self._clock.now_ms() + READ_TIMEOUT_MS
        while not done.done():
            now = self._clock.now_ms()
            if now >= give_up:
                raise NodeUnavailable(f"ledger {self.ledger_id} entry {entry_id}: no replica answered")
            deadline = core.next_deadline_ms()
            wait_ms = min(give_up, deadline if deadline is not None else give_up) - now
            await asyncio.wait([done], timeout=max(wait_ms, 1) / 1000)
            if not done.done():
                run(core.on_timer(self._clock.now_ms()))
        return done.result()

    # ------------------------------------------------------------ ranges

    async def read_range(self, first: int, last: int, max_bytes: int | None = None) -> list[bytes]:
        """Payloads of entries ``first..last`` in order (with ``max_bytes``: a prefix, see
        ``read_range_entries``)."""
        return [entry.payload for entry in await self.read_range_entries(first, last, max_bytes)]

    async def read_range_entries(
        self, first: int, last: int, max_bytes: int | None = None
    ) -> list[wire.Entry]:
        """Entries ``first..last`` in order. With ``max_bytes``, the reading stops once
        that many payload bytes arrived: a prefix of at least one entry, over the bound
        by at most one node reply (``wire.RANGE_READ_BYTES_MAX``) or one window of single
        reads sized by the entries seen, whatever the entries' sizes."""
        await self._ensure_readable(first, last)
        bound = max_bytes if max_bytes is not None else -1
        entries: list[wire.Entry] = []
        total = 0
        for part in plan_range(self.metadata, first, last):
            got: list[wire.Entry] = []
            for node in part.range_nodes:
                got = await self._range_from(node, part.first, part.last)
                if got:
                    break
            total += _payload_bytes(got)
            while got and got[-1].entry_id < part.last and not 0 <= bound <= total:  # stopped early
                more = await self._range_from(part.range_nodes[0], got[-1].entry_id + 1, part.last)
                if not more:
                    break
                got.extend(more)
                total += _payload_bytes(more)
            entries.extend(got)
            next_id = part.first + len(got)
            if 0 <= bound <= total:
                return entries
            if next_id <= part.last:
                many = await self._read_many(next_id, part.last, bound - total if bound >= 0 else None)
                entries.extend(many)
                total += _payload_bytes(many)
                if len(many) < part.last - next_id + 1:  # the byte bound stopped it
                    return entries
        return entries

    async def _range_from(self, node: NodeId, first: int, last: int) -> list[wire.Entry]:
        """Entries first.. (contiguous, verified) that ``node`` returned; [] on any problem."""
        status, body = await self._pool.get(node).request(
            wire.Op.READ_RANGE, wire.range_body(self.ledger_id, first, last), RANGE_TIMEOUT_MS
        )
        if status is not Status.OK:
            return []
        try:
            raw = wire.parse_entries(body)
        except ProtocolViolation:
            return []
        entries: list[wire.Entry] = []
        for offset, data in enumerate(raw):
            entry = verify(self.ledger_id, first + offset, data)
            if entry is None or entry.entry_id > last:
                break
            entries.append(entry)
        return entries

    async def _read_many(self, first: int, last: int, max_bytes: int | None = None) -> list[wire.Entry]:
        """Entries ``first..last`` by pipelined single reads, ``READ_WINDOW`` at a time.
        With ``max_bytes`` the reading stops once that many bytes arrived, and the
        windows start at ``FIRST_BOUNDED_WINDOW``, at most double from one to the
        next, and are no larger than the bytes left take of the largest entry seen
        (entry sizes are not known before they arrive: a window can pass the bound
        by its own size, which this keeps small when sizes jump)."""
        entries: list[wire.Entry] = []
        total = largest = 0
        window = READ_WINDOW if max_bytes is None else FIRST_BOUNDED_WINDOW
        start = first
        while start <= last and (max_bytes is None or total < max_bytes):
            end = min(last, start + window - 1)
            got = await asyncio.gather(*(self._read_with_refresh(e) for e in range(start, end + 1)))
            entries.extend(got)
            sizes = [len(entry.payload) for entry in got]
            total += sum(sizes)
            largest = max(largest, *sizes)
            if max_bytes is not None:
                window = max(1, min(READ_WINDOW, 2 * window, (max_bytes - total) // max(largest, 1) + 1))
            start = end + 1
        return entries

    async def _read_with_refresh(self, entry_id: int) -> wire.Entry:
        try:
            return await self._read_one(entry_id)
        except (NoSuchEntry, NodeUnavailable):
            if self.closed:
                raise
            await self.refresh()
            return await self._read_one(entry_id)

    # ------------------------------------------------------------ LAC

    async def read_lac(self, previous: int = -1, timeout_ms: int = 0) -> int:
        """The LAC, asking the last ensemble; with ``timeout_ms`` > 0 waits (long
        poll) until some node knows a LAC above ``previous``."""
        if self.closed:
            return self.metadata.last_entry_id
        nodes = self.metadata.last_ensemble
        poll = LacPoll(nodes, max(previous, -1))
        done: asyncio.Future[int] = self._loop.create_future()
        body = wire.read_lac_body(self.ledger_id, previous, timeout_ms)

        def on_reply(node: NodeId, token: object, status: Status, data: bytes) -> None:
            lac = -1
            if status is Status.OK or status is Status.TIMEOUT:
                with contextlib.suppress(ProtocolViolation):
                    lac, _ = wire.parse_lac_reply(data)
            decided = poll.on_response(node, status, lac)
            if decided is not None and not done.done():
                done.set_result(decided)

        for node in nodes:
            self._pool.get(node).send(wire.Op.READ_LAC, body, on_reply, None)
        try:
            lac = await asyncio.wait_for(done, (timeout_ms + LAC_POLL_MARGIN_MS) / 1000)
        except TimeoutError:
            lac = poll.best
        self._lac = max(self._lac, lac)
        return self._lac

    async def close(self) -> None:
        """Readers hold no resources of their own (connections are the client's)."""
