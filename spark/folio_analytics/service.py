"""``folio analytics``: the long-lived Spark driver that computes topic statistics.

Owns: one service process - its etcd lease, its candidacy in the
``analytics`` election, its Spark session (started once, when elected), and
the loop that takes runs from the run record (a gateway's request, or the
schedule), reads what is new in every topic partition (``job.ReadJob``),
folds it into the stored state and writes results, state and positions
(``assemble``), reporting progress in the run record as it goes. Rules:
decisions live in ``coordination.analytics_run`` (one run at a time, one
queued, a dead service's run queued again), ``schedule`` (per namespace) and
``assemble``; every write is fenced by the service's election key (``fence``:
a paused former leader's writes are refused) and every run-record write is
also a CAS; a service that loses its lease stops (exit 75: restart me)
and a standby takes over, continuing from the stored positions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson

from coordination import analytics_run as run_core
from coordination import keys
from coordination.clock import Clock, WallClock
from coordination.election import Election
from coordination.session import LeaseSession
from coordination.store import MetadataStore
from folio_analytics import store_io
from folio_analytics.assemble import LogInput, needs_full_read, partition_record, topic_record
from folio_analytics.fence import Fence, Fenced
from folio_analytics.job import LogRef, ReadJob
from folio_analytics.profile import Profile
from folio_analytics.results import cluster_summary
from folio_analytics.schedule import Schedule, covered, due_scope
from folio_analytics.session import spark_session
from folio_analytics.sql import SqlRunner

log = logging.getLogger("folio.analytics")

POLL_S = 0.5
PROGRESS_S = 0.2  # while Spark reads, the entries of its finished tasks are reported this often
SCHEDULE_CHECK_MS = 2_000  # the schedule (settings, namespace policies) is read at most this often
SPARK_START_ATTEMPTS = 3


class AnalyticsService:
    def __init__(
        self,
        store: MetadataStore,
        service_id: str,
        read_options: dict[str, str],
        *,
        master: str = "local[*]",
        lease_ttl_s: int = 10,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.service_id = service_id
        self.read_options = read_options
        self.master = master
        self.clock = clock or WallClock()
        self.session = LeaseSession(store, lease_ttl_s)
        self.spark: Any = None
        self.sql: SqlRunner | None = None
        self._next_schedule_ms = 0
        # replaced when elected; until then every write is refused (no key has mod_revision -1)
        self.fence = Fence(store, keys.election(keys.ANALYTICS_ELECTION) + service_id, -1)

    async def run(self) -> None:
        """Campaign, then serve runs and queries until the lease is lost."""
        await self.elect()
        started = time.monotonic()
        for attempt in range(1, SPARK_START_ATTEMPTS + 1):
            try:
                self.spark = await asyncio.to_thread(spark_session, self.master)
                break
            except Exception:
                log.exception("Spark session did not start (attempt %d)", attempt)
                if attempt == SPARK_START_ATTEMPTS:
                    raise
                await asyncio.sleep(2.0 * attempt)
        self.sql = SqlRunner(self.spark, self.store, self.read_options, self.clock, self.fence)
        print(
            f"FOLIO-ANALYTICS LEADER id={self.service_id} spark={time.monotonic() - started:.1f}s", flush=True
        )
        await self._update(lambda r: run_core.adopt(r, self.service_id, self.clock.now_ms()))
        queries = asyncio.create_task(self.sql.serve(self.session.lost))
        try:
            while not self.session.lost.is_set():
                await self._tick()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.session.lost.wait(), POLL_S)
        except Fenced:  # paused past the lease: another service leads now; exit 75 as on a lost lease
            log.warning("no longer the elected analytics service: stopping", exc_info=True)
        finally:
            queries.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await queries

    async def elect(self) -> None:
        """Start the lease, campaign, and return once elected with the writes fenced by it."""
        await self.session.start()
        election = Election(self.store, keys.ANALYTICS_ELECTION, self.service_id, self.session)
        print(f"FOLIO-ANALYTICS READY id={self.service_id}", flush=True)
        await election.campaign()
        self.fence = Fence(self.store, election.key, election.mod_revision)

    async def close(self) -> None:
        await self.session.close()
        if self.spark is not None:
            await asyncio.to_thread(self.spark.stop)

    # ------------------------------------------------------------ the run record

    async def _update(self, change: Any) -> run_core.RunRecord | None:
        """CAS ``change(record) -> record | None`` into the run record; the record written."""
        written: list[run_core.RunRecord] = []

        def modify(raw: bytes | None) -> bytes | None:
            new = change(run_core.RunRecord.from_json(raw))
            written[:] = [new] if new is not None else []
            return None if new is None else new.to_json()

        await self.fence.update(keys.ANALYTICS_RUN, modify)
        return written[0] if written else None

    async def _schedule(self) -> tuple[Schedule, dict[str, int]]:
        """The cluster's and every namespace's interval, and when each namespace was last covered."""
        settings = await store_io.read_json(self.store, keys.ANALYTICS_SETTINGS)
        policies = await store_io.namespace_policies(self.store)
        stored = await store_io.read_json(self.store, keys.ANALYTICS_SCHEDULE) or {}
        last = {str(ns): int(ms) for ns, ms in (stored.get("covered") or {}).items()}
        return Schedule.of(settings, policies), last

    async def _tick(self) -> None:
        now = self.clock.now_ms()
        if now >= self._next_schedule_ms:
            self._next_schedule_ms = now + SCHEDULE_CHECK_MS
            schedule, last = await self._schedule()
            scope = due_scope(schedule, last, now)
            if scope is not None:

                def scheduled(record: run_core.RunRecord) -> run_core.RunRecord | None:
                    if record.queued or record.state is run_core.RunState.RUNNING:
                        return None
                    return run_core.request(record, self.clock.now_ms(), "scheduled", scope)[0]

                await self._update(scheduled)
        taken = await self._update(lambda r: run_core.take(r, self.service_id, self.clock.now_ms()))
        if taken is not None:
            await self._run(taken)

    # ------------------------------------------------------------ one run

    async def _run(self, record: run_core.RunRecord) -> None:
        run_id = record.run_id
        began = time.monotonic()
        try:
            figures = await self._statistics(run_id, record.scope)
        except Fenced:
            raise
        except Exception as exc:  # a failed run is reported, the service goes on
            log.exception("statistics run %d failed", run_id)
            text = str(exc)  # a Python worker's traceback: its end says what failed
            error = (
                f"{type(exc).__name__}: {text[:300]}{' … ' + text[-700:] if len(text) > 1000 else text[300:]}"
            )
            await self._update(lambda r: run_core.finish(r, run_id, self.clock.now_ms(), {}, error))
        else:
            figures["durationMs"] = round((time.monotonic() - began) * 1000)
            await self._update(lambda r: run_core.finish(r, run_id, self.clock.now_ms(), figures))
        schedule, last = await self._schedule()
        done = covered(last, record.scope, schedule.namespaces, self.clock.now_ms())
        await self.fence.put(keys.ANALYTICS_SCHEDULE, orjson.dumps({"covered": done}))

    async def _progress(self, run_id: int, phase: str, done: int, total: int) -> None:
        step = run_core.Progress(phase, done, total)
        await self._update(lambda r: None if r.progress == step else run_core.progress(r, run_id, step))

    async def _statistics(self, run_id: int, scope: tuple[str, ...]) -> dict[str, Any]:
        began = time.monotonic()
        every = await store_io.list_logs(self.store)
        logs = [ref for ref in every if not scope or ref.namespace in scope]
        others = sorted({ref.topic for ref in every} - {ref.topic for ref in logs})
        stored: dict[str, Profile] = {}
        previous: dict[str, dict[str, Any]] = {}
        starts: dict[str, tuple[int, int] | None] = {}
        for ref in logs:
            record = await store_io.read_json(self.store, keys.analytics_topic(ref.path))
            starts[ref.path] = None
            if record is None or "state" not in record:
                continue
            profile = Profile.from_json(record["state"])
            if needs_full_read(profile, ref.ledgers):
                continue  # retention trimmed it: read the partition again from its start
            stored[ref.path] = profile
            starts[ref.path] = profile.last
            previous[ref.path] = record["results"].get("subscriptions", {})
        await self._progress(run_id, "reading", 0, 0)
        listed = time.monotonic()
        group = f"folio-analytics-run-{run_id}"
        decode = await store_io.decodable_topics(self.store, {ref.topic for ref in logs})
        job = ReadJob(self.spark, self.read_options, logs, starts, group, decode)
        reading = asyncio.create_task(asyncio.to_thread(job.run))
        while not reading.done():  # entries of the finished Spark tasks, as they finish
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reading), PROGRESS_S)
            done, total = job.progress()
            if total:
                await self._progress(run_id, "reading", done, total)
        result = reading.result()
        read = time.monotonic()
        await self._write(run_id, logs, stored, previous, result.partials, result.read, others)
        return {
            "listMs": round((listed - began) * 1000),
            "readMs": round((read - listed) * 1000),
            "writeMs": round((time.monotonic() - read) * 1000),
            "partitions": len(logs),
            "topics": len({ref.topic for ref in logs}),
            "messagesRead": sum(r["messages"] for r in result.read.values()),
            "entriesRead": job.progress()[0],
            "bytesRead": sum(r["bytes"] for r in result.read.values()),
        }

    async def _write(
        self,
        run_id: int,
        logs: list[LogRef],
        stored: dict[str, Profile],
        previous: dict[str, dict[str, Any]],
        partials: dict[str, Profile],
        read: dict[str, dict[str, Any]],
        others: list[str],
    ) -> None:
        """Write every log's record (and each partitioned topic's), then the cluster summary
        of these and of ``others``, the topics outside this run's scope, as last written."""
        cursors = {ref.path: await store_io.cursors_of(self.store, ref.path) for ref in logs}
        views = await store_io.owner_views(
            await store_io.gateway_urls(self.store), [p for p, c in cursors.items() if c]
        )
        now = self.clock.now_ms()
        shown: dict[str, dict[str, Any]] = {}
        partitions: dict[str, dict[int, dict[str, Any]]] = {}
        for i, ref in enumerate(logs):
            profile = stored.get(ref.path) or Profile()
            if ref.path in partials:
                profile.merge(partials[ref.path])
            record = partition_record(
                LogInput(
                    profile,
                    cursors[ref.path],
                    views.get(ref.path, {}),
                    previous.get(ref.path, {}),
                    read.get(ref.path, {"messages": 0, "bytes": 0, "from": None, "to": None}),
                ),
                run_id,
                now,
            )
            await self.fence.put(keys.analytics_topic(ref.path), orjson.dumps(record))
            if ref.partition < 0:
                shown[ref.topic] = record["results"]
            else:
                partitions.setdefault(ref.topic, {})[ref.partition] = record
            await self._progress(run_id, "writing", i + 1, len(logs))
        for topic, parts in partitions.items():
            record = topic_record(parts, run_id, now)
            await self.fence.put(keys.analytics_topic(topic.replace("://", "/", 1)), orjson.dumps(record))
            shown[topic] = record["results"]
        for topic in others:
            kept = await store_io.read_json(self.store, keys.analytics_topic(topic.replace("://", "/", 1)))
            if kept is not None and kept.get("results"):
                shown[topic] = kept["results"]
        await self.fence.put(keys.ANALYTICS_SUMMARY, orjson.dumps(cluster_summary(shown, now)))
