"""``folio analytics``: the long-lived Spark driver that computes topic statistics.

Owns: one service process - its etcd lease, its candidacy in the
``analytics`` election, its Spark session (started once, when elected), and
the loop that takes runs from the run record (a gateway's request, or the
schedule), reads what is new in every topic partition (``job.read_new``),
folds it into the stored state and writes results, state and positions
(``assemble``), reporting progress in the run record as it goes. Rules:
decisions live in ``coordination.analytics_run`` (one run at a time, one
queued, a dead service's run queued again) and ``assemble``; every run-record
write is a CAS; a service that loses its lease stops (exit 75: restart me)
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
from coordination.store import MetadataStore, update_with_retry
from folio_analytics import store_io
from folio_analytics.assemble import LogInput, needs_full_read, partition_record, topic_record
from folio_analytics.job import LogRef, job_progress, read_new
from folio_analytics.profile import Profile
from folio_analytics.results import cluster_summary
from folio_analytics.session import spark_session
from folio_analytics.sql import SqlRunner

log = logging.getLogger("folio.analytics")

DEFAULT_INTERVAL_S = 300  # as gateway.api.admin_analytics: scheduled runs every 5 minutes unless set
POLL_S = 0.5
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

    async def run(self) -> None:
        """Campaign, then serve runs and queries until the lease is lost."""
        await self.session.start()
        election = Election(self.store, keys.ANALYTICS_ELECTION, self.service_id, self.session)
        print(f"FOLIO-ANALYTICS READY id={self.service_id}", flush=True)
        await election.campaign()
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
        self.sql = SqlRunner(self.spark, self.store, self.read_options, self.clock)
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
        finally:
            queries.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await queries

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

        await update_with_retry(self.store, keys.ANALYTICS_RUN, modify)
        return written[0] if written else None

    async def _interval_s(self) -> int:
        settings = await store_io.read_json(self.store, keys.ANALYTICS_SETTINGS)
        try:
            return int((settings or {}).get("intervalSeconds", DEFAULT_INTERVAL_S))
        except (TypeError, ValueError):
            return DEFAULT_INTERVAL_S

    async def _tick(self) -> None:
        interval = await self._interval_s()

        def schedule(record: run_core.RunRecord) -> run_core.RunRecord | None:
            if not run_core.due(record, interval, self.clock.now_ms()):
                return None
            return run_core.request(record, self.clock.now_ms(), "scheduled")[0]

        await self._update(schedule)
        taken = await self._update(lambda r: run_core.take(r, self.service_id, self.clock.now_ms()))
        if taken is not None:
            await self._run(taken)

    # ------------------------------------------------------------ one run

    async def _run(self, record: run_core.RunRecord) -> None:
        run_id = record.run_id
        began = time.monotonic()
        try:
            figures = await self._statistics(run_id)
        except Exception as exc:  # a failed run is reported, the service goes on
            log.exception("statistics run %d failed", run_id)
            text = str(exc)  # a Python worker's traceback: its end says what failed
            error = (
                f"{type(exc).__name__}: {text[:300]}{' … ' + text[-700:] if len(text) > 1000 else text[300:]}"
            )
            await self._update(lambda r: run_core.finish(r, run_id, self.clock.now_ms(), {}, error))
            return
        figures["durationMs"] = round((time.monotonic() - began) * 1000)
        await self._update(lambda r: run_core.finish(r, run_id, self.clock.now_ms(), figures))

    async def _progress(self, run_id: int, phase: str, done: int, total: int) -> None:
        step = run_core.Progress(phase, done, total)
        await self._update(lambda r: None if r.progress == step else run_core.progress(r, run_id, step))

    async def _statistics(self, run_id: int) -> dict[str, Any]:
        began = time.monotonic()
        logs = await store_io.list_logs(self.store)
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
        reading = asyncio.create_task(
            asyncio.to_thread(read_new, self.spark, self.read_options, logs, starts, group)
        )
        while not reading.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reading), POLL_S)
            done, total = job_progress(self.spark, group)
            if total:
                await self._progress(run_id, "reading", done, total)
        result = reading.result()
        read = time.monotonic()
        await self._write(run_id, logs, stored, previous, result.partials, result.read)
        return {
            "listMs": round((listed - began) * 1000),
            "readMs": round((read - listed) * 1000),
            "writeMs": round((time.monotonic() - read) * 1000),
            "partitions": len(logs),
            "topics": len({ref.topic for ref in logs}),
            "messagesRead": sum(r["messages"] for r in result.read.values()),
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
    ) -> None:
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
            await store_io.write_json(self.store, keys.analytics_topic(ref.path), record)
            if ref.partition < 0:
                shown[ref.topic] = record["results"]
            else:
                partitions.setdefault(ref.topic, {})[ref.partition] = record
            await self._progress(run_id, "writing", i + 1, len(logs))
        for topic, parts in partitions.items():
            record = topic_record(parts, run_id, now)
            await store_io.write_json(self.store, keys.analytics_topic(topic.replace("://", "/", 1)), record)
            shown[topic] = record["results"]
        await self.store.put(keys.ANALYTICS_SUMMARY, orjson.dumps(cluster_summary(shown, now)))
