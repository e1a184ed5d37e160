"""The auditor: elected once per cluster, it re-replicates lost fragments.

Owns: the auditor task (one leader at a time, via ``coordination.election``),
its worker tasks, the ``/folio/under-replicated/`` markers and the progress
record ``/folio/recovery-status`` (also served as Prometheus gauges by
``storage/auditor/metrics.py``). Decisions come from ``audit_core``; this
shell only reads etcd, copies entries and CASes ensembles. Rules:
- a node counts as gone after ``grace_ms`` missing from membership;
- entries are copied from surviving replicas (checksums verified by the
  reader) to the replacement with recovery-adds, *then* the ensemble is CASed,
  so metadata never names a node that lacks the fragment;
- a ledger still open on a gone node is recovered (fenced + closed) first;
- read-only nodes are replaced like gone ones (audit_core), without a grace;
- draining nodes (``keys.DRAINS``, storage/drain.py) too; after each pass the
  auditor writes each drain's progress into its record (CAS, never re-creating a
  cancelled one) and turns it DRAINED once no ledger names the node and the node
  refuses adds - the node then leaves by itself (storage/node/registration.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from coordination import keys
from coordination.clock import Clock, SystemClock, WallClock, wall_ms
from coordination.errors import CoordinationError
from coordination.patience import Outage
from coordination.store import MetadataStore, update_with_retry
from storage import drain, wire
from storage.auditor.audit_core import (
    DEFAULT_GRACE_MS,
    Fragment,
    LedgerPlan,
    Membership,
    clear_missing,
    entries_on_node,
    plan_ledger,
    referenced_nodes,
    replace_in_segment,
)
from storage.client import placement
from storage.client.api import LedgerClient
from storage.client.connection import ConnectionConfig
from storage.client.reader import LedgerReader
from storage.drain import DrainRecord, DrainState
from storage.errors import Status, StorageError
from storage.types import LedgerMetadata, NodeId, NodeInfo

log = logging.getLogger(__name__)

WORKERS_MAX = 4  # ledgers re-replicated at once
COPY_CHUNK_ENTRIES = 256  # entries read per range request while copying
COPY_INFLIGHT_MAX = 256  # recovery-adds outstanding to the replacement node
CHECK_INTERVAL_MS = 5_000  # full scan period even without membership changes


@dataclass
class Progress:
    gone: list[str] = field(default_factory=list)
    under_replicated: int = 0
    fragments_done: int = 0
    entries_copied: int = 0
    ledgers_fenced: int = 0
    failures: int = 0
    ledgers_checked: int = 0  # ledgers scanned by the last pass
    ledgers_repaired: int = 0  # ledgers brought back to Qw copies since this auditor leads
    passes: int = 0

    def to_json(self, auditor_id: str) -> bytes:
        return orjson.dumps(
            {
                "auditor": auditor_id,
                "goneNodes": self.gone,
                "underReplicatedLedgers": self.under_replicated,
                "fragmentsReplicated": self.fragments_done,
                "entriesCopied": self.entries_copied,
                "ledgersFenced": self.ledgers_fenced,
                "failures": self.failures,
                "ledgersChecked": self.ledgers_checked,
                "ledgersRepaired": self.ledgers_repaired,
                "ledgersPending": self.under_replicated,
                "passes": self.passes,
                "updatedAtMs": wall_ms(),
            }
        )


class Auditor:
    def __init__(
        self,
        store: MetadataStore,
        auditor_id: str,
        grace_ms: int = DEFAULT_GRACE_MS,
        check_interval_ms: int = CHECK_INTERVAL_MS,
        clock: Clock | None = None,
        seed: int | None = None,
        cluster_secret: bytes | None = None,
        drain_fence_grace_ms: int = drain.DEFAULT_FENCE_GRACE_MS,
        wall_clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.wall_clock: Clock = wall_clock or WallClock()  # drain records: stored, read by others
        self.drain_fence_grace_ms = drain_fence_grace_ms
        self.auditor_id = auditor_id
        self.clock: Clock = clock or SystemClock()
        self.client = LedgerClient(
            store, self.clock, seed, connection_config=ConnectionConfig(auth_secret=cluster_secret)
        )
        self.membership = Membership(grace_ms)
        self.check_interval_ms = check_interval_ms
        self.progress = Progress()
        self._rng = random.Random(seed)
        self._workers = asyncio.Semaphore(WORKERS_MAX)

    async def run_once(self) -> int:
        """One audit pass; returns how many ledgers still need work."""
        now = self.clock.now_ms()
        nodes = await self.client.metadata.live_nodes()
        ledgers = await self._all_ledgers()
        self.membership.on_members({n.node_id for n in nodes}, referenced_nodes(ledgers), now)
        gone = self.membership.gone(now)
        drains = await self._drains()
        wall_now = self.wall_clock.now_ms()
        fence = frozenset(
            r.node_id for r in drains if drain.fence_due(r, wall_now, self.drain_fence_grace_ms)
        )
        read_only = frozenset(n.node_id for n in nodes if n.read_only) | drain.draining_nodes(drains)
        plans = [p for p in (plan_ledger(m, gone, read_only, fence) for m in ledgers) if p is not None]
        self.progress.gone = sorted(gone)
        self.progress.under_replicated = len(plans)
        self.progress.ledgers_checked = len(ledgers)
        for plan in plans:
            marker = orjson.dumps({"nodes": list(plan.lost_nodes), "needsFence": plan.needs_fence})
            await self.store.put(keys.under_replicated(plan.ledger_id), marker)
        await self._publish()
        results = await asyncio.gather(
            *(self._repair(plan, gone, read_only) for plan in plans), return_exceptions=True
        )
        remaining = 0
        for plan, result in zip(plans, results, strict=True):
            if result is True:
                await self.store.delete(keys.under_replicated(plan.ledger_id))
                self.progress.ledgers_repaired += 1
            else:
                remaining += 1
                if isinstance(result, BaseException):
                    self.progress.failures += 1
                    log.warning("auditor: ledger %d not repaired yet: %r", plan.ledger_id, result)
        # markers of ledgers that vanished or healed by themselves
        wanted = {
            keys.under_replicated(p.ledger_id) for p, r in zip(plans, results, strict=True) if r is not True
        }
        for kv in await self.store.list_prefix(keys.UNDER_REPLICATED):
            if kv.key not in wanted:
                await self.store.delete(kv.key)
        self.progress.under_replicated = remaining
        self.progress.passes += 1
        await self._publish()
        if drains:
            await self._advance_drains(drains, await self.client.metadata.live_nodes())
        return remaining

    async def _drains(self) -> list[DrainRecord]:
        records = []
        for kv in await self.store.list_prefix(keys.DRAINS):
            try:
                records.append(DrainRecord.from_json(kv.value))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("auditor: ignoring unreadable drain record %s: %r", kv.key, exc)
        return records

    async def _advance_drains(self, drains: list[DrainRecord], nodes: list[NodeInfo]) -> None:
        """Write each draining node's progress; DRAINED once nothing names it and it
        refuses adds (it may then leave: every fragment it held is on other nodes)."""
        ledgers = await self._all_ledgers()
        registered = {n.node_id: n for n in nodes}
        for record in drains:
            if record.state is not DrainState.DRAINING:
                continue
            node_id = record.node_id
            held = drain.holdings(ledgers, node_id)
            info = registered.get(node_id)
            refuses = info is None or info.read_only

            with contextlib.suppress(CoordinationError):
                await update_with_retry(self.store, keys.drain(node_id), self._drain_step(held, refuses))

    def _drain_step(self, held: drain.Holdings, refuses: bool) -> Callable[[bytes | None], bytes | None]:
        def step(current: bytes | None) -> bytes | None:
            if current is None:
                return None  # cancelled meanwhile: never re-create it
            updated = drain.advance(DrainRecord.from_json(current), held, refuses, self.wall_clock.now_ms())
            if updated is not None and updated.state is DrainState.DRAINED:
                log.info("auditor: storage node %s is drained: no ledger names it", updated.node_id)
            return None if updated is None else updated.to_json()

        return step

    async def _all_ledgers(self) -> list[LedgerMetadata]:
        return [LedgerMetadata.from_json(kv.value) for kv in await self.store.list_prefix(keys.LEDGERS)]

    async def _publish(self) -> None:
        with contextlib.suppress(CoordinationError):
            await self.store.put(keys.RECOVERY_STATUS, self.progress.to_json(self.auditor_id))

    async def _repair(self, plan: LedgerPlan, gone: frozenset[NodeId], read_only: frozenset[NodeId]) -> bool:
        async with self._workers:
            if plan.needs_fence:
                log.info(
                    "auditor: fencing and closing ledger %d (open on %s)", plan.ledger_id, plan.lost_nodes
                )
                await self.client.open(plan.ledger_id, recover=True)
                self.progress.ledgers_fenced += 1
                fresh = plan_ledger(await self.client.metadata.read(plan.ledger_id), gone, read_only)
                if fresh is None:
                    return True
                plan = fresh
            for fragment in plan.fragments:
                await self._copy_fragment(fragment, gone)
                self.progress.fragments_done += 1
                await self._publish()
            return plan_ledger(await self.client.metadata.read(plan.ledger_id), gone, read_only) is None

    async def _copy_fragment(self, fragment: Fragment, gone: frozenset[NodeId]) -> None:
        metadata = await self.client.metadata.read(fragment.ledger_id)
        segment = metadata.segments[fragment.segment_index]
        if fragment.lost_node not in segment.ensemble:
            return  # repaired by someone else meanwhile
        nodes = await self.client.metadata.live_nodes()
        lost_node = fragment.lost_node
        writable = {n.node_id for n in nodes if not n.read_only and not n.draining}
        if lost_node in segment.missing and lost_node in writable and lost_node not in gone:
            replacement = lost_node  # it lacks some entries: copy them back to it
        else:
            replacement = placement.choose_replacement(nodes, segment.ensemble, gone, self._rng)
        wanted = set(entries_on_node(metadata, segment, fragment.last_entry_id, fragment.lost_node))
        # a fragment is a fixed range of confirmed entries (the open tail of an open ledger
        # is fenced first, never copied): a later segment starts at its writer's LAC + 1
        # (write_core), so the reader may read the whole range even while the ledger is
        # open - with the default LAC (-1) it refused every entry of it
        reader = LedgerReader(
            metadata, self.client.metadata, self.client.pool, self.clock, lac=fragment.last_entry_id
        )
        target = self.client.pool.get(replacement)
        log.info(
            "auditor: ledger %d segment %d entries %d..%d: %s -> %s (%d entries)",
            fragment.ledger_id,
            fragment.segment_index,
            fragment.first_entry_id,
            fragment.last_entry_id,
            fragment.lost_node,
            replacement,
            len(wanted),
        )
        window = asyncio.Semaphore(COPY_INFLIGHT_MAX)
        pending: list[asyncio.Task[None]] = []

        async def copy_one(entry: wire.Entry) -> None:
            try:
                data = wire.encode_entry(entry.ledger_id, entry.entry_id, entry.lac, entry.payload)
                status, _ = await target.request(wire.Op.ADD, wire.add_body(data, recovery=True))
                if status is not Status.OK:
                    raise StorageError(
                        f"recovery-add of {entry.ledger_id}:{entry.entry_id} to {replacement}: {status.name}"
                    )
            finally:
                window.release()

        for first in range(fragment.first_entry_id, fragment.last_entry_id + 1, COPY_CHUNK_ENTRIES):
            last = min(fragment.last_entry_id, first + COPY_CHUNK_ENTRIES - 1)
            for entry in await reader.read_range_entries(first, last):
                if entry.entry_id in wanted:
                    await window.acquire()
                    pending.append(asyncio.ensure_future(copy_one(entry)))
        await asyncio.gather(*pending)
        self.progress.entries_copied += len(wanted)
        index, lost = fragment.segment_index, fragment.lost_node
        if replacement == lost:
            await self.client.metadata.update(fragment.ledger_id, lambda cur: clear_missing(cur, index, lost))
        else:
            await self.client.metadata.update(
                fragment.ledger_id, lambda current: replace_in_segment(current, index, lost, replacement)
            )

    async def run_as_leader(self, stop: asyncio.Event) -> None:
        """Audit until ``stop`` is set: after each pass, wait for the next grace
        deadline, the check interval, or a membership change."""
        changed = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch_members(changed))
        outage = Outage(log, "auditor pass")  # etcd away: said once, not every pass
        try:
            while not stop.is_set():
                try:
                    remaining = await self.run_once()
                    outage.answered()
                except CoordinationError as exc:
                    outage.failed(exc)
                    remaining = 1
                except StorageError as exc:
                    log.warning("auditor pass failed: %r", exc)
                    remaining = 1
                now = self.clock.now_ms()
                wait_ms = self.check_interval_ms if not remaining else min(self.check_interval_ms, 1000)
                deadline = self.membership.next_deadline_ms(now)
                if deadline is not None:
                    wait_ms = min(wait_ms, max(10, deadline - now))
                changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_first(stop, changed), wait_ms / 1000)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            await self.client.close()

    async def _watch_members(self, changed: asyncio.Event) -> None:
        from coordination.membership import watch_members

        while True:
            try:
                async for _ in watch_members(self.store, keys.NODES):
                    changed.set()
            except CoordinationError as exc:
                log.warning("auditor: membership watch restarted: %r", exc)
                await asyncio.sleep(1)


async def _first(*events: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
