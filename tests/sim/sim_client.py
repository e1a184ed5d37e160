"""Simulated ledger writer: the real ``WriteCore`` behind a thin simulated shell.

Owns: the shell work a real client does around the pure writer core: sending
its ``SendAdd`` effects over the SimNetwork, turning replies, connection resets
and core deadlines back into core inputs, running ``FindNodes`` / ``WriteSegment``
against the real ``MemoryStore`` (``update_with_retry`` + ``apply_segment``) and
an append workload with pipelining. Also ``SimClient``, the request/reply
plumbing shared by every simulated client (one pending table, reset and
time-out turn into UNAVAILABLE replies, as a real connection does).
Rule: the shell decides nothing a core should decide; it only carries effects
out in order and reports what happened to the ``Checker``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

from coordination import keys
from coordination.memory_store import MemoryStore
from coordination.store import update_with_retry
from storage import wire
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
from storage.errors import Status, StorageError
from storage.types import NO_ENTRY, LedgerMetadata, NodeInfo

from .checkers import Checker
from .sim_node import Reply, Request
from .world import MetaService, Scheduler, SimNetwork, Timer

ReplyHandler = Callable[[Reply], None]


class SimClient:
    """A client endpoint: numbered requests, replies matched by id, failures synthesized."""

    def __init__(self, name: str, sched: Scheduler, net: SimNetwork) -> None:
        self.name = name
        self.sched = sched
        self.net = net
        self.up = True  # clients do not crash in this simulation
        self.incarnation = 0
        self._pending: dict[int, tuple[str, int, ReplyHandler]] = {}  # node, its incarnation
        self._next_req = 1
        net.register(self)

    @property
    def now(self) -> int:
        return self.sched.clock.now_ms()

    def request(
        self,
        node: str,
        op: wire.Op,
        ledger_id: int,
        on_reply: ReplyHandler,
        entry_id: int = NO_ENTRY,
        body: bytes = b"",
        timeout_ms: int | None = None,
    ) -> None:
        req_id = self._next_req
        self._next_req += 1
        self._pending[req_id] = (node, self.net.incarnation(node), on_reply)
        self.net.send(self.name, node, Request(req_id, op, ledger_id, entry_id, body))
        if timeout_ms is not None:
            self.sched.after(timeout_ms, lambda: self._fail(req_id))

    def receive(self, message: Reply, src: str) -> None:
        pending = self._pending.pop(message.req_id, None)
        if pending is not None:
            pending[2](message)

    def on_disconnect(self, peer: str, incarnation: int) -> None:
        """Requests sent to that process (not to a later one) fail with UNAVAILABLE."""
        for req_id, (node, sent_to, _) in list(self._pending.items()):
            if node == peer and sent_to <= incarnation:
                self._fail(req_id)

    def _fail(self, req_id: int) -> None:
        pending = self._pending.pop(req_id, None)
        if pending is not None:
            pending[2](Reply(req_id, Status.UNAVAILABLE))


class WriterShell(SimClient):
    def __init__(
        self,
        name: str,
        sched: Scheduler,
        net: SimNetwork,
        meta: MetaService,
        store: MemoryStore,
        checker: Checker,
        metadata: LedgerMetadata,
        config: WriterConfig,
        rng: random.Random,
        entries: int,
        window: int,
        think_ms_max: int,
    ) -> None:
        super().__init__(name, sched, net)
        self._meta = meta
        self._store = store
        self._checker = checker
        self._rng = rng
        self.core = WriteCore(metadata, config, random.Random(rng.getrandbits(32)))
        self.entries = entries
        self.window = window
        self._think_ms_max = think_ms_max
        self._key = keys.ledger(metadata.ledger_id)
        self._timer = Timer(sched, self._on_timer, checker.fail)
        self.error: StorageError | None = None
        self.appended = 0
        self.confirmed = NO_ENTRY

    def start(self) -> None:
        self.sched.soon(self._pump)

    # ------------------------------------------------------------ workload

    def _pump(self) -> None:
        core = self.core
        while (
            self.error is None
            and self.appended < self.entries
            and core.outstanding < self.window
            and not self._rng.random() < 0.3  # sometimes pause between appends
        ):
            payload = self._payload(self.appended)
            if not core.can_accept(len(payload)):
                break
            entry_id, effects = core.on_append(payload, self.now)
            self.appended += 1
            send = effects[0]
            assert isinstance(send, SendAdd) and send.entry_id == entry_id
            self._checker.writer_appended(entry_id, wire.parse_add(send.body)[4])
            self._execute(effects)
        if self.error is None and self.appended < self.entries:
            self.sched.after(self._rng.randint(1, self._think_ms_max), self._pump)

    def _payload(self, index: int) -> bytes:
        size = self._rng.randint(1, 120)
        return f"e{index}:".encode() + bytes(self._rng.getrandbits(8) for _ in range(size))

    # ------------------------------------------------------------ effects

    def _execute(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, SendAdd):
                for node in effect.nodes:
                    self.request(
                        node,
                        wire.Op.ADD,
                        self.core.metadata.ledger_id,
                        self._add_reply(node, effect.entry_id),
                        effect.entry_id,
                        effect.body,
                    )
            elif isinstance(effect, CompleteAdds):
                self.confirmed = effect.lac
                self._checker.writer_confirmed(effect.lac)
            elif isinstance(effect, FindNodes):
                self._meta.call(lambda: self._store.list_prefix(keys.NODES), self._on_nodes)
            elif isinstance(effect, WriteSegment):
                self._meta.call(partial(self._write_segment, effect), self._on_segment)
            elif isinstance(effect, FailAll):
                self.error = effect.error
            else:
                raise AssertionError(f"unexpected writer effect {effect!r}")
        self._timer.arm(self.core.next_deadline_ms())

    def _add_reply(self, node: str, entry_id: int) -> ReplyHandler:
        return lambda reply: self._execute(self.core.on_add_response(node, entry_id, reply.status, self.now))

    def _on_timer(self) -> None:
        self._execute(self.core.on_timer(self.now))

    def _on_nodes(self, result: Any) -> None:
        if isinstance(result, Exception):
            raise result
        infos = [NodeInfo.from_json(kv.value) for kv in result]
        self._execute(self.core.on_live_nodes(infos, self.now))

    async def _write_segment(self, change: WriteSegment) -> LedgerMetadata:
        def modify(old: bytes | None) -> bytes:
            assert old is not None
            return apply_segment(LedgerMetadata.from_json(old), change).to_json()

        value, _ = await update_with_retry(self._store, self._key, modify)
        assert value is not None
        return LedgerMetadata.from_json(value)

    def _on_segment(self, result: Any) -> None:
        if isinstance(result, StorageError):
            self._execute(self.core.on_segment_failed(result, self.now))
        elif isinstance(result, Exception):
            raise result
        else:
            self._execute(self.core.on_segment_written(result, self.now))
