"""Node registration in etcd, disk watch (read-only mode) and ledger reclaim watch.

Owns: this node's lease and its key ``keys.node(node_id)`` (JSON NodeInfo),
its persistent "known node" record ``keys.node_known(node_id)`` (no lease;
docs/decisions/0007: lets the admin API tell a gone node from one never seen),
the read-only decision, and the watch on ``keys.LEDGERS`` that drops deleted
ledgers from this node.
Rules:
- the NodeInfo key lives under a ``LeaseSession`` (coordination/session.py) and is
  (re)put with ``membership.register``; a lost lease is replaced by a new
  session and the key re-put (the node keeps serving meanwhile);
- read-only iff free disk < ``min_free_bytes`` or free/total <
  ``min_free_ratio`` (or forced by the test knob), or while a drain record
  ``keys.drain(node_id)`` exists (the node is being decommissioned, published as
  ``draining``; docs/decisions/0020, read every second); adds are refused while
  read-only and accepted again once space returns (or the drain is cancelled);
- once the drain record says DRAINED (the auditor found no ledger naming this
  node) the node leaves: ``on_drained`` is called once, and the process stops
  cleanly and revokes its lease - its data dir may then be deleted;
- a ledger is reclaimed only when etcd says it is gone: a DELETE event, or
  absence from a listing taken *after* this node's ledger set was snapshot
  (metadata is always created before the first add reaches a node).
Test knob: env ``FOLIO_TEST_FREE_BYTES_FILE`` names a file whose integer
content, when the file exists, replaces the measured free bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from coordination import keys, membership
from coordination.clock import wall_ms
from coordination.errors import CoordinationError
from coordination.patience import Outage
from coordination.session import LeaseSession
from coordination.store import EventKind, MetadataStore
from storage.drain import DrainRecord, DrainState
from storage.node.service import NodeService
from storage.types import NodeInfo

log = logging.getLogger("folio.storage.registration")

DISK_CHECK_S = 1.0
STOP_TIMEOUT_S = 3.0
GC_RETRY_S = 1.0


async def _bounded(awaitable: Awaitable[object], timeout_s: float, what: str) -> None:
    """Wait at most ``timeout_s`` without waiting again for a cancellation to finish."""
    future = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({future}, timeout=timeout_s)
    if not done:
        log.warning("registration stop: %s did not finish within %.1fs; going on", what, timeout_s)
    elif not future.cancelled() and future.exception() is not None:
        log.warning("registration stop: %s failed: %r", what, future.exception())


@dataclass(frozen=True, slots=True)
class DiskPolicy:
    min_free_bytes: int = 0
    min_free_ratio: float = 0.0

    def read_only(self, free: int, total: int) -> bool:
        if free < self.min_free_bytes:
            return True
        return total > 0 and free / total < self.min_free_ratio


def disk_usage(path: Path) -> tuple[int, int]:
    """(free, total) bytes of the file system holding ``path`` (knob-aware)."""
    st = os.statvfs(path)
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    knob = os.environ.get("FOLIO_TEST_FREE_BYTES_FILE")
    if knob:
        with contextlib.suppress(FileNotFoundError, ValueError):
            free = int(Path(knob).read_text().strip())
    return free, total


class Registration:
    def __init__(
        self,
        store: MetadataStore,
        service: NodeService,
        node_id: str,
        metrics_address: str,
        policy: DiskPolicy,
        lease_ttl_s: int = 10,
    ) -> None:
        self.store = store
        self.service = service
        self.node_id = node_id
        self.metrics_address = metrics_address
        self.policy = policy
        self.lease_ttl_s = lease_ttl_s
        self.session: LeaseSession | None = None
        self._free, self._total = disk_usage(service.config.data_dir)
        self._load = 0.0
        self._ops_seen = (time.monotonic(), 0)
        self._tasks: list[asyncio.Task[None]] = []
        self._gc_outage = Outage(log, f"ledger reclaim watch of {node_id}")
        self.draining = False  # a drain record names this node (docs/decisions/0020)
        self.on_drained: Callable[[], None] | None = None  # the process leaves when called
        self._left = False

    # ------------------------------------------------------------ node info

    def node_info(self) -> NodeInfo:
        return NodeInfo(
            node_id=self.node_id,
            address=self.node_id,
            metrics_address=self.metrics_address,
            free_bytes=self._free,
            total_bytes=self._total,
            load=round(self._load, 1),
            read_only=self.service.read_only,
            ledger_count=len(self.service.ledgers),
            draining=self.draining,
        )

    def check_disk(self) -> bool:
        """Re-measure the disk, update read-only mode; True if it changed."""
        self._free, self._total = disk_usage(self.service.config.data_dir)
        now, ops = time.monotonic(), self.service.ops
        then, ops_then = self._ops_seen
        if now > then:
            self._load = 0.7 * self._load + 0.3 * (ops - ops_then) / (now - then)
        self._ops_seen = (now, ops)
        read_only = self.policy.read_only(self._free, self._total) or self.draining
        metrics = self.service.metrics
        metrics.free_bytes.set(self._free)
        metrics.ledgers.set(len(self.service.ledgers))
        if read_only == self.service.read_only:
            return False
        self.service.read_only = read_only
        metrics.read_only.set(1 if read_only else 0)
        log.warning(
            "node is now %s (free %d of %d bytes%s)",
            "READ-ONLY" if read_only else "writable",
            self._free,
            self._total,
            ", being decommissioned" if self.draining else "",
        )
        return True

    async def check_drain(self) -> bool:
        """Read this node's drain record; True if ``draining`` changed. A DRAINED
        record calls ``on_drained`` (once)."""
        kv = await self.store.get(keys.drain(self.node_id))
        record: DrainRecord | None = None
        if kv is not None:
            try:
                record = DrainRecord.from_json(kv.value)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("unreadable drain record of this node: %r; treating it as draining", exc)
        draining = kv is not None
        changed = draining != self.draining
        if changed:
            what = "DRAINING (decommission)" if draining else "drain cancelled"
            log.warning("node %s: %s", self.node_id, what)
        self.draining = draining
        if record is not None and record.state is DrainState.DRAINED and not self._left:
            self._left = True
            log.warning(
                "node %s is drained: no ledger names it any more; leaving (its data dir may be deleted)",
                self.node_id,
            )
            if self.on_drained is not None:
                self.on_drained()
        return changed

    # ------------------------------------------------------------ lease

    async def register(self) -> None:
        """Open a lease session and put NodeInfo under it. ``takeover``: the key may
        still be held by this node's previous incarnation (kill -9); we hold the port
        and the data dir cookie, so that incarnation is dead."""
        await self.check_drain()
        self.check_disk()
        if self.session is None or self.session.lost.is_set():  # else a retry: keep the lease
            self.session = await LeaseSession(self.store, self.lease_ttl_s).start()
        await self.publish()
        await self.store.put(keys.node_known(self.node_id), self.known_record())

    def known_record(self) -> bytes:
        """The persistent record of this node (written at each registration, never leased)."""
        return orjson.dumps(
            {
                "nodeId": self.node_id,
                "address": self.node_id,
                "metricsAddress": self.metrics_address,
                "registeredMs": wall_ms(),
            }
        )

    async def publish(self) -> None:
        assert self.session is not None
        await membership.register(
            self.store, keys.node(self.node_id), self.node_info().to_json(), self.session, takeover=True
        )

    @property
    def lease(self) -> int:
        return self.session.lease_id if self.session is not None else 0

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._keepalive_loop(), name="registration"),
            asyncio.create_task(self._ledger_gc_loop(), name="ledger-gc"),
        ]

    async def _keepalive_loop(self) -> None:
        """Disk checks every second; NodeInfo re-put on change and every ttl/3;
        a new session when the lease is lost (e.g. etcd was unreachable too long)."""
        publish_every = max(0.2, self.lease_ttl_s / 3)
        next_publish = time.monotonic() + publish_every
        outage = Outage(log, f"registration of {self.node_id}")  # etcd away: said once
        while True:
            await asyncio.sleep(min(DISK_CHECK_S, publish_every))
            changed = self.check_disk()
            try:
                if await self.check_drain():
                    changed = self.check_disk() or True
                if self.session is None or self.session.lost.is_set():
                    if self.session is not None:
                        reason = self.session.lost_reason
                        log.warning("registration lease lost (%s): registering again", reason)
                        await self.session.close(revoke=False)
                        self.session = None
                    await self.register()
                elif changed or time.monotonic() >= next_publish:
                    await self.publish()
                else:
                    continue
                outage.answered()
                next_publish = time.monotonic() + publish_every
            except CoordinationError as exc:
                outage.failed(exc)

    async def stop_tasks(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop the disk/registration and ledger-watch loops within ``timeout_s``: a
        task cancelled while aetcd subscribes a watch can stay "cancelling" for good,
        and a clean stop must not hang on it."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await _bounded(asyncio.gather(*self._tasks, return_exceptions=True), timeout_s, "tasks")
        self._tasks = []

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop the loops, then revoke the lease (the node key goes at once)."""
        await self.stop_tasks(timeout_s)
        if self.session is not None:
            await _bounded(self.session.close(revoke=True), timeout_s, "lease revoke")

    # ------------------------------------------------------------ reclaim

    async def _ledger_gc_loop(self) -> None:
        while True:
            try:
                await self._ledger_gc_pass()
            except CoordinationError as exc:
                self._gc_outage.failed(exc)  # the watch ended (etcd away): said once
            await asyncio.sleep(GC_RETRY_S)

    async def _ledger_gc_pass(self) -> None:
        local = self.service.local_ledger_ids()
        revision = await self.store.revision()
        live = set()
        for kv in await self.store.list_prefix(keys.LEDGERS):
            with contextlib.suppress(ValueError):
                live.add(keys.ledger_id_from_key(kv.key))
        self._gc_outage.answered()
        for ledger_id in sorted(local - live):
            await self.service.delete_ledger(ledger_id)
        async for event in self.store.watch_prefix(keys.LEDGERS, revision + 1):
            if event.kind is EventKind.DELETE:
                with contextlib.suppress(ValueError):
                    await self.service.delete_ledger(keys.ledger_id_from_key(event.key))
