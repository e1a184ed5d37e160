"""The statistics job: read what is new in every topic partition, fold it on Spark.

Owns: ``LogRef`` (one partition's log as the job sees it), ``starting_offsets``
(the connector's ``startingOffsets`` JSON: each partition from the entry after
the last one folded, or from the earliest) and ``ReadJob``: the connector's own
plan of the read on the driver (entries planned per partition, and Spark
partitions cut to about ``TASKS_PER_CORE`` per core so progress moves as they
finish), then one Spark job - the ``folio`` data source -> the projection
``arrow_fold.COLUMNS`` -> ``mapInArrow(fold_partials)`` -> the partial profiles,
collected on the driver; a topic with a JSON or AVRO schema is read with
``decode=true`` so its payload fields are profiled too - and ``progress``, the
planned entries pro rata to the Spark tasks finished (Spark's status tracker),
which the service reports while the job runs. Rule: ``run`` runs in a worker
thread of the service; only partial profiles, never messages, reach the
driver. (A Spark accumulator of entries per task gave exact counts but made a
200,000-message run take 20 s instead of 10 s in ``folio bench analytics``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import orjson
from pyspark_folio.batch import FolioBatchReader
from pyspark_folio.options import ReadOptions
from pyspark_folio.plan import ENTRIES_PER_RANGE, ReadRange

from folio_analytics.arrow_fold import COLUMNS, DECODED, PARTIAL_SCHEMA, fold_partials
from folio_analytics.profile import Bounds, Profile

PARTITION_SUFFIX = "-partition-"
TASKS_PER_CORE = 2  # a run's read is cut into about this many Spark tasks per core


@dataclass(frozen=True, slots=True)
class LogRef:
    path: str  # etcd <topic path> of the log: persistent/t/ns/x or persistent/t/ns/x-partition-2
    topic: str  # the full name users publish to: persistent://t/ns/x
    partition: int  # -1: not partitioned
    ledgers: tuple[int, ...] = ()

    @property
    def namespace(self) -> str:
        """``tenant/ns``."""
        return "/".join(self.topic.split("://", 1)[1].split("/")[:2])

    @property
    def name(self) -> str:
        return log_name(self.topic, self.partition)


def log_name(topic: str, partition: int) -> str:
    """The full name of a topic partition's log (``partition`` -1: not partitioned)."""
    return topic if partition < 0 else f"{topic}{PARTITION_SUFFIX}{partition}"


@dataclass(slots=True)
class ReadResult:
    partials: dict[str, Profile] = field(default_factory=dict)  # by log path
    read: dict[str, dict[str, Any]] = field(default_factory=dict)  # by log path: what was read


def starting_offsets(logs: list[LogRef], starts: dict[str, tuple[int, int] | None]) -> str:
    """Flat ``{"<partition's full name>": "L:E:0"}``: the entry after each last folded one."""
    offsets: dict[str, Any] = {}
    for log in logs:
        start = starts.get(log.path)
        offsets[log.name] = -2 if start is None else f"{start[0]}:{start[1] + 1}:0"
    return orjson.dumps(offsets).decode()


def entries_per_task(total: int, cores: int) -> int:
    """Entries per Spark partition: about ``TASKS_PER_CORE`` tasks per core, within the
    connector's default bound."""
    return max(1, min(ENTRIES_PER_RANGE, math.ceil(total / max(1, TASKS_PER_CORE * cores))))


class ReadJob:
    """Fold every message after ``starts`` in ``logs`` (``options``: etcd connection); the
    topics of ``decode_topics`` (a JSON or AVRO schema) with their payload fields."""

    def __init__(
        self,
        spark: Any,
        options: dict[str, str],
        logs: list[LogRef],
        starts: dict[str, tuple[int, int] | None],
        group: str,
        decode_topics: frozenset[str] = frozenset(),
        bounds: Bounds | None = None,
    ) -> None:
        self.spark = spark
        self.options = {
            **options,
            "startingOffsets": starting_offsets(logs, starts),
            # a stored position retention has since deleted: read from the log's first message
            # (the next run sees the ledger gone from the stored state and reads the partition anew)
            "failOnDataLoss": "false",
        }
        self.logs = logs
        self.group = group
        self.decode_topics = decode_topics & {log.topic for log in logs}
        self.bounds = bounds
        self.planned: dict[str, int] = {}  # log name -> entries planned

    def plan(self) -> int:
        """The connector's plan of this read on the driver: entries per partition. Returns the
        entries per Spark partition that give about ``TASKS_PER_CORE`` tasks per core."""
        topics = ",".join(sorted({log.topic for log in self.logs}))
        options = ReadOptions.parse({k.lower(): v for k, v in {**self.options, "topics": topics}.items()})
        planned: dict[str, int] = {}
        for part in FolioBatchReader(options).partitions():
            if isinstance(part, ReadRange):
                planned[part.log.name] = planned.get(part.log.name, 0) + part.entries
        self.planned = planned
        return entries_per_task(sum(planned.values()), self.spark.sparkContext.defaultParallelism)

    def progress(self) -> tuple[int, int]:
        """(entries read, entries planned) while ``run`` runs: the planned entries pro rata to the
        Spark tasks finished (the tasks are cut to about equal entry ranges)."""
        total = sum(self.planned.values())
        tracker = self.spark.sparkContext.statusTracker()
        done = tasks = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    tasks += stage.numTasks
        return (total * done // tasks if tasks else 0), total

    def run(self) -> ReadResult:
        result = ReadResult()
        if not self.logs:
            return result
        per_task = self.plan()
        if not self.planned:
            return result  # nothing new anywhere
        context = self.spark.sparkContext
        context.setJobGroup(self.group, "folio statistics run", interruptOnCancel=True)
        plain = sorted({log.topic for log in self.logs} - self.decode_topics)
        # one read of every topic without a JSON/AVRO schema; one decode=true read per topic
        # with one (each has its own ``decoded`` struct); their partial profiles are one Spark job
        reads = ([(",".join(plain), False)] if plain else []) + [
            (t, True) for t in sorted(self.decode_topics)
        ]
        try:
            partials = None
            for topics, decode in reads:
                frame = (
                    self.spark.read.format("folio")
                    .options(**self.options)
                    .option("topics", topics)
                    .option("decode", "true" if decode else "false")
                    .option("entriesPerPartition", str(per_task))
                    .load()
                )
                columns = [f"{expr} AS {name}" for name, expr in COLUMNS.items()]
                folded = frame.selectExpr(*columns, *([DECODED] if decode else [])).mapInArrow(
                    fold_partials, PARTIAL_SCHEMA
                )
                partials = folded if partials is None else partials.unionByName(folded)
            rows = partials.collect() if partials is not None else []
        finally:
            context.setLocalProperty("spark.jobGroup.id", None)
        self._gather(rows, result)
        return result

    def _gather(self, rows: list[Any], result: ReadResult) -> None:
        by_name = {log.name: log for log in self.logs}
        for row in rows:
            log = by_name.get(
                row["topic"]
                if row["partition"] < 0
                else f"{row['topic']}{PARTITION_SUFFIX}{row['partition']}"
            )
            if log is None:
                continue  # a partition created since the listing: the next run reads it
            partial = Profile.from_json(orjson.loads(row["profile"]), self.bounds)
            have = result.partials.get(log.path)
            if have is None:
                result.partials[log.path] = partial
            else:
                have.merge(partial)
        for path, partial in result.partials.items():
            result.read[path] = {
                "messages": partial.messages,
                "bytes": partial.bytes,
                "from": list(partial.first) if partial.first else None,
                "to": list(partial.last) if partial.last else None,
            }
