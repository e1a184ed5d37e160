"""SQL over topics in the analytics service (asyncio + Spark shell).

Owns: ``SqlRunner`` - taking pending queries from etcd
(``keys.ANALYTICS_QUERIES``, written by any gateway) one at a time, running
each on the service's Spark session within its bounds (``sql_core.Limits``:
the Spark job group is cancelled at the time bound; rows past the row bound
are cut; an answer past the byte bound is an error), writing the answer back,
and keeping only the newest ``QUERY_HISTORY`` queries. Rule: every topic a
query names is read straight from the storage nodes by the ``folio`` data
source, as the statistics are; answers are written through the service's
``fence`` (a former leader's answer is refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

import orjson

from coordination import keys
from coordination.analytics_run import QUERY_HISTORY
from coordination.clock import Clock
from coordination.store import MetadataStore
from folio_analytics.fence import Fence, Fenced
from folio_analytics.sql_core import (
    Limits,
    QueryError,
    failure_reason,
    missing_topics,
    rewrite,
    to_cells,
    topic_path,
)

log = logging.getLogger("folio.analytics.sql")

POLL_S = 0.2
CANCEL_EVERY_S = 0.5


class SqlRunner:
    def __init__(
        self, spark: Any, store: MetadataStore, read_options: dict[str, str], clock: Clock, fence: Fence
    ) -> None:
        self.spark = spark
        self.store = store
        self.fence = fence
        self.read_options = read_options
        self.clock = clock
        self._count = 0

    async def serve(self, stop: asyncio.Event) -> None:
        try:
            await self._serve(stop)
        except Fenced:  # no longer elected: the new leader answers the queries
            log.warning("SQL answers stop: no longer the elected analytics service")

    async def _serve(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            listing = await self.store.list_prefix(keys.ANALYTICS_QUERIES)
            pending = [kv for kv in listing if orjson.loads(kv.value).get("state") == "pending"]
            for kv in listing[: max(0, len(listing) - QUERY_HISTORY)]:
                await self.store.compare_and_delete(kv.key, kv.mod_revision)
            if pending:
                await self._answer(pending[0].key, pending[0].mod_revision, orjson.loads(pending[0].value))
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)

    async def _answer(self, key: str, revision: int, record: dict[str, Any]) -> None:
        record["state"] = "running"
        revision_now = await self.fence.swap(key, orjson.dumps(record), revision)
        if revision_now is None:
            return  # changed or deleted under us
        began = time.monotonic()
        try:
            limits = Limits(int(record["maxRows"]), int(record["maxBytes"]), int(record["timeoutSeconds"]))
            await self._check_topics(str(record["query"]))
            answer = await asyncio.to_thread(self.run, str(record["query"]), limits)
            record.update(answer, state="done", error=None)
        except QueryError as exc:
            record.update(state="error", error=str(exc), columns=[], rows=[])
        record["elapsedMs"] = round((time.monotonic() - began) * 1000)
        await self.fence.swap(key, orjson.dumps(record), revision_now)

    async def _check_topics(self, query: str) -> None:
        """QueryError naming every topic the query reads that does not exist (neither a
        topic's log nor a partitioned topic in etcd), before Spark plans anything."""
        _, views = rewrite(query)
        missing = []
        for name in sorted(set(views.values())):
            path = topic_path(name)
            if await self.store.get(keys.managed_log(path)) is None and (
                await self.store.get(keys.partitioned(path)) is None
            ):
                missing.append(name)
        if missing:
            raise missing_topics(missing)

    def run(self, query: str, limits: Limits) -> dict[str, Any]:
        """Run ``query`` on Spark within ``limits`` (a worker thread)."""
        from pyspark.errors import PySparkException

        text, views = rewrite(query)
        self._count += 1
        group = f"folio-sql-{self._count}"
        context = self.spark.sparkContext
        timer = _Deadline(limits.timeout_s, lambda: context.cancelJobGroup(group))
        try:
            for view, topic in views.items():
                frame = (
                    self.spark.read.format("folio").options(**self.read_options).option("topic", topic).load()
                )
                frame.createOrReplaceTempView(view)
            context.setJobGroup(group, "folio SQL query", interruptOnCancel=True)
            timer.start()
            frame = self.spark.sql(text)
            rows = frame.limit(limits.max_rows + 1).collect()
        except PySparkException as exc:
            if timer.fired:
                raise QueryError(f"query stopped at its time bound of {limits.timeout_s} s") from exc
            reason = failure_reason(str(exc)) if str(exc).strip() else type(exc).__name__
            raise QueryError(f"query failed: {reason[:1000]}") from exc
        except Exception as exc:  # py4j errors of a cancelled job are not PySparkExceptions
            if timer.fired:
                raise QueryError(f"query stopped at its time bound of {limits.timeout_s} s") from exc
            raise QueryError(f"query failed: {failure_reason(str(exc))[:1000]}") from exc
        finally:
            timer.cancel()
            context.setLocalProperty("spark.jobGroup.id", None)
            for view in views:
                with contextlib.suppress(Exception):
                    self.spark.catalog.dropTempView(view)
        if timer.fired:  # planning outlasted the bound and the job ended before a cancel reached it
            raise QueryError(f"query stopped at its time bound of {limits.timeout_s} s")
        truncated = len(rows) > limits.max_rows
        raw = orjson.dumps([to_cells(r) for r in rows[: limits.max_rows]], default=str)
        size = len(raw)
        if size > limits.max_bytes:
            raise QueryError(
                f"answer of {size} bytes is over the query's bound of {limits.max_bytes} bytes: "
                "select fewer columns or rows"
            )
        columns = [{"name": f.name, "type": f.dataType.simpleString()} for f in frame.schema.fields]
        cells = orjson.loads(raw)
        return {"columns": columns, "rows": cells, "truncated": truncated, "rowCount": len(cells)}


class _Deadline(threading.Thread):
    """Calls ``cancel`` at ``seconds`` and every ``CANCEL_EVERY_S`` after, until ``cancel()``
    of this deadline: a job submitted after the first cancel (planning a Python data
    source takes a while) is cancelled too."""

    def __init__(self, seconds: float, cancel: Any) -> None:
        super().__init__(daemon=True)
        self.seconds = seconds
        self.action = cancel
        self.done = threading.Event()
        self.fired = False

    def run(self) -> None:
        if self.done.wait(self.seconds):
            return
        self.fired = True
        while not self.done.is_set():
            with contextlib.suppress(Exception):
                self.action()
            self.done.wait(CANCEL_EVERY_S)

    def cancel(self) -> None:
        self.done.set()
