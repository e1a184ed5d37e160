"""LedgerWriter: the asyncio shell around ``write_core`` for one open ledger.

Owns: the futures of pending appends, the wiring of core effects to node
connections, and one background task per writer that runs the core's timers
and its ensemble changes (live-node listing, probing failed nodes that may
come back, and the metadata CAS).
An append may name an ``on_done`` callback: it is called with the settled
future right when the add completes (after the effects of the reply that
completed it), without the loop round a future's done-callback costs.
Rules: the core is only touched from the event loop thread and never across
an ``await`` in the middle of a decision, so no lock is needed: appends and
reply callbacks call it synchronously, the background task calls it between
its awaits. Appends complete strictly in entry order (``CompleteAdds``).
Backpressure: at most ``WriterConfig.outstanding_adds_max`` adds /
``outstanding_bytes_max`` bytes unconfirmed; ``append_nowait`` raises
``WriterFull`` beyond that, ``submit``/``append`` wait for room.
Closing (docs/compatibility.md §6.4): CAS OPEN -> CLOSED with the LAC; IN_RECOVERY
means someone fenced us (Fenced); CLOSED with the same last entry is success.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable

from coordination.clock import Clock
from coordination.errors import CoordinationError
from storage import wire
from storage.client.metadata import LedgerMetadataStore
from storage.client.pool import ConnectionPool
from storage.client.write_core import WriteCore
from storage.client.write_effects import (
    CompleteAdds,
    Effect,
    FailAll,
    FindNodes,
    SendAdd,
    WriterConfig,
    WriteSegment,
    apply_segment,
)
from storage.errors import (
    Fenced,
    LedgerClosed,
    MetadataConflict,
    QuorumLost,
    Status,
    StorageError,
    TooLarge,
)
from storage.types import LedgerMetadata, LedgerState, NodeId, Segment

log = logging.getLogger(__name__)

TIMER_INTERVAL_MS_MAX = 200  # a writer with something to time looks at its core at least this often
METADATA_RETRY_MS = 200  # etcd unavailable during an ensemble change: retry after this
PROBE_TIMEOUT_MS = 1_000  # a failed node asked for its info before it is taken back
_ADD = int(wire.Op.ADD)

DoneCallback = Callable[["asyncio.Future[int]"], None]


class WriterFull(StorageError):
    """Too many unconfirmed appends; wait (``submit``) or slow down."""

    code = "writer_full"
    retriable = True


def close_writer(
    current: LedgerMetadata, last_entry_id: int, length: int, missing: frozenset[NodeId] = frozenset()
) -> LedgerMetadata | None:
    """Modify step of the writer's closing CAS (docs/compatibility.md §6.4). ``missing``:
    members of the last segment the writer went on without (recorded on it)."""
    if current.state is LedgerState.OPEN:
        segments = current.segments
        last = segments[-1]
        missing = missing & set(last.ensemble)
        if missing and last.first_entry_id <= last_entry_id:
            segments = (*segments[:-1], Segment(last.first_entry_id, last.ensemble, last.missing | missing))
        return current.with_changes(
            state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length, segments=segments
        )
    if current.state is LedgerState.IN_RECOVERY:
        raise Fenced(f"ledger {current.ledger_id} is being recovered by another client")
    if current.last_entry_id == last_entry_id:
        return None
    raise MetadataConflict(
        f"ledger {current.ledger_id} was closed at {current.last_entry_id}, "
        f"this writer confirmed {last_entry_id}"
    )


class LedgerWriter:
    def __init__(
        self,
        metadata: LedgerMetadata,
        metadata_store: LedgerMetadataStore,
        pool: ConnectionPool,
        clock: Clock,
        config: WriterConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._core = WriteCore(metadata, config, rng)
        self._meta = metadata_store
        self._pool = pool
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._futures: deque[asyncio.Future[int]] = deque()
        self._on_done: deque[DoneCallback | None] = deque()  # aligned with _futures
        self._settled: deque[tuple[DoneCallback, asyncio.Future[int]]] = deque()
        self._running_callbacks = False
        self._first_future_id = self._core.next_entry_id
        self._room = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._idle = False  # the background task waits without a timer (no deadline)
        self._changes: deque[FindNodes | WriteSegment] = deque()
        self._closing = False
        self._closed: LedgerMetadata | None = None
        self._task = self._loop.create_task(self._run(), name=f"ledger-writer-{metadata.ledger_id}")

    # ------------------------------------------------------------ queries

    @property
    def ledger_id(self) -> int:
        return self._core.metadata.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._closed or self._core.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self._core.lac

    @property
    def outstanding(self) -> int:
        return self._core.outstanding

    @property
    def ensemble_changes(self) -> int:
        return self._core.ensemble_changes

    @property
    def error(self) -> StorageError | None:
        return self._core.error

    # ------------------------------------------------------------ appending

    def append_nowait(self, payload: bytes, on_done: DoneCallback | None = None) -> asyncio.Future[int]:
        """Start an append; the future resolves to its entry id once it and
        every earlier entry are confirmed. Raises WriterFull when at the bound.
        ``on_done(future)``, if given, is called synchronously once it is settled."""
        core = self._core
        if core.error is not None:
            raise type(core.error)(str(core.error))
        if self._closing:
            raise LedgerClosed(f"ledger {self.ledger_id} is closing")
        size = len(payload)
        if size > wire.MAX_ENTRY_PAYLOAD_BYTES:
            raise TooLarge(f"entry of {size} bytes exceeds {wire.MAX_ENTRY_PAYLOAD_BYTES}")
        if not core.can_accept(size):
            raise WriterFull(f"ledger {self.ledger_id}: {core.outstanding} appends outstanding")
        _, effects = core.on_append(payload, self._clock.now_ms())
        future: asyncio.Future[int] = self._loop.create_future()
        self._futures.append(future)
        self._on_done.append(on_done)
        self._execute(effects)
        self._poke()
        return future

    async def submit(self, payload: bytes) -> asyncio.Future[int]:
        """Like ``append_nowait`` but waits for room instead of raising."""
        core = self._core
        while core.error is None and not self._closing and not core.can_accept(len(payload)):
            self._room.clear()
            await self._room.wait()
        return self.append_nowait(payload)

    async def append(self, payload: bytes) -> int:
        return await (await self.submit(payload))

    # ------------------------------------------------------------ effects

    def _execute(self, effects: list[Effect]) -> None:
        for effect in effects:
            if type(effect) is SendAdd:
                pool, on_reply, entry_id, body = self._pool, self._on_add_reply, effect.entry_id, effect.body
                for node in effect.nodes:
                    pool.get(node).send(_ADD, body, on_reply, entry_id)
            elif type(effect) is CompleteAdds:
                self._complete(effect.lac)
            elif type(effect) is FailAll:
                self._fail(effect.error)
            else:
                assert isinstance(effect, FindNodes | WriteSegment)
                self._changes.append(effect)
                self._wakeup.set()
        if self._settled:
            self._run_callbacks()

    def _run_callbacks(self) -> None:
        """Call the ``on_done`` of settled adds, in entry order; a callback may append
        (that nested call leaves the rest of the queue to this one)."""
        if self._running_callbacks:
            return
        self._running_callbacks = True
        settled = self._settled
        try:
            while settled:
                callback, future = settled.popleft()
                try:
                    callback(future)
                except Exception:
                    log.exception("ledger %d: append callback failed", self.ledger_id)
        finally:
            self._running_callbacks = False

    def _on_add_reply(self, node: NodeId, entry_id: int, status: Status, body: bytes) -> None:
        if status is Status.OK:
            effects = self._core.on_add_ack(node, entry_id)
        else:
            effects = self._core.on_add_response(node, entry_id, status, self._clock.now_ms())
        if effects:
            self._execute(effects)
        if status is not Status.OK:
            self._poke()

    def _poke(self) -> None:
        """Wake an idle background task: an input may have given the core a deadline."""
        if self._idle:
            self._wakeup.set()

    def _complete(self, lac: int) -> None:
        futures, callbacks, settled = self._futures, self._on_done, self._settled
        first = self._first_future_id
        while first <= lac and futures:  # after abandon() late acks find no futures left
            future = futures.popleft()
            callback = callbacks.popleft()
            if not future.done():
                future.set_result(first)
                if callback is not None:
                    settled.append((callback, future))
            first += 1
        self._first_future_id = first
        self._room.set()

    def _fail(self, error: StorageError) -> None:
        log.warning("ledger %d writer failed: %s (%s)", self.ledger_id, error, error.code)
        while self._futures:
            future = self._futures.popleft()
            callback = self._on_done.popleft()
            if not future.done():
                future.set_exception(type(error)(str(error)))
                if callback is not None:
                    self._settled.append((callback, future))
        self._room.set()
        self._wakeup.set()

    # ------------------------------------------------------------ background task

    async def _run(self) -> None:
        core = self._core
        while core.error is None and self._closed is None:
            deadline = core.next_deadline_ms()
            if not self._changes and deadline is None:
                # idle (nothing outstanding, no change to retry): no timer at all, so an
                # idle ledger costs nothing per tick; ``_poke`` wakes the task on input
                self._idle = True
                try:
                    await self._wakeup.wait()
                finally:
                    self._idle = False
            elif not self._changes and deadline is not None:
                wait_ms = max(0, min(TIMER_INTERVAL_MS_MAX, deadline - self._clock.now_ms()))
                # a timer that sets the event, not asyncio.wait_for: cancelling a
                # task inside 3.11's wait_for could leave it stuck "cancelling"
                timer = self._loop.call_later(wait_ms / 1000, self._wakeup.set)
                try:
                    await self._wakeup.wait()
                finally:
                    timer.cancel()
            self._wakeup.clear()
            self._execute(core.on_timer(self._clock.now_ms()))
            while self._changes and core.error is None:
                await self._change(self._changes.popleft())

    async def _change(self, effect: FindNodes | WriteSegment) -> None:
        core = self._core
        while True:
            try:
                if isinstance(effect, FindNodes):
                    nodes = await self._meta.live_nodes()
                    registered = {node.node_id for node in nodes}
                    probes = [self._answers(n) for n in sorted(effect.probe) if n in registered]
                    answered = [node for node, ok in await asyncio.gather(*probes) if ok]
                    self._execute(core.on_live_nodes(nodes, self._clock.now_ms(), answered))
                else:
                    stored = await self._meta.update(self.ledger_id, lambda cur: apply_segment(cur, effect))
                    log.info(
                        "ledger %d: ensemble %s -> %s from entry %d",
                        self.ledger_id,
                        effect.old_ensemble,
                        effect.ensemble,
                        effect.first_entry_id,
                    )
                    self._execute(core.on_segment_written(stored, self._clock.now_ms()))
                return
            except StorageError as exc:
                self._execute(core.on_segment_failed(exc, self._clock.now_ms()))
                return
            except CoordinationError as exc:
                if not exc.retriable:
                    self._execute(core.on_segment_failed(MetadataConflict(str(exc)), self._clock.now_ms()))
                    return
                log.info("ledger %d: metadata store unavailable (%s); retrying", self.ledger_id, exc.code)
                await asyncio.sleep(METADATA_RETRY_MS / 1000)

    async def _answers(self, node: NodeId) -> tuple[NodeId, bool]:
        """Does ``node`` answer a node-info request now?"""
        try:
            status, _ = await self._pool.get(node).request(int(wire.Op.NODE_INFO), b"", PROBE_TIMEOUT_MS)
        except (StorageError, OSError):
            return node, False
        return node, status is Status.OK

    # ------------------------------------------------------------ closing

    async def close(self) -> LedgerMetadata:
        """Wait for outstanding appends, then close the ledger at its LAC - also after
        the writer lost its write quorum (its LAC is still what it confirmed).
        Raises the writer's other errors (e.g. Fenced)."""
        if self._closed is not None:
            return self._closed
        self._closing = True
        self._room.set()
        if self._futures:
            await asyncio.gather(*list(self._futures), return_exceptions=True)
        try:
            error = self._core.error
            if error is not None and not isinstance(error, QuorumLost):
                raise type(error)(str(error))
            lac, length, failed = self._core.lac, self._core.confirmed_bytes, self._core.failed_nodes
            self._closed = await self._meta.update(
                self.ledger_id, lambda cur: close_writer(cur, lac, length, failed)
            )
            return self._closed
        finally:
            await self._stop()

    async def _stop(self) -> None:
        self._wakeup.set()
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def abandon(self) -> None:
        """Stop without closing the ledger (e.g. the client shuts down)."""
        self._closing = True
        await self._stop()
        if self._futures:
            self._fail(LedgerClosed(f"ledger {self.ledger_id} writer abandoned"))
            self._run_callbacks()
