"""The statistics job: read what is new in every topic partition, fold it on Spark.

Owns: ``LogRef`` (one partition's log as the job sees it), ``starting_offsets``
(the connector's ``startingOffsets`` JSON: each partition from the entry after
the last one folded, or from the earliest) and ``read_new`` (one Spark job:
the ``folio`` data source -> the projection ``arrow_fold.COLUMNS`` ->
``mapInArrow(fold_partials)`` -> the partial profiles, collected on the
driver; a topic with a JSON or AVRO schema is read with ``decode=true`` so its
payload fields are profiled too), and ``job_progress`` (tasks done / total of a job group, from Spark's
status tracker). Rule: runs in a worker thread of the service; only partial
profiles, never messages, reach the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from folio_analytics.arrow_fold import COLUMNS, DECODED, PARTIAL_SCHEMA, fold_partials
from folio_analytics.profile import Bounds, Profile

PARTITION_SUFFIX = "-partition-"


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
        return self.topic if self.partition < 0 else f"{self.topic}{PARTITION_SUFFIX}{self.partition}"


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


def read_new(
    spark: Any,
    options: dict[str, str],
    logs: list[LogRef],
    starts: dict[str, tuple[int, int] | None],
    group: str,
    decode_topics: frozenset[str] = frozenset(),
    bounds: Bounds | None = None,
) -> ReadResult:
    """Fold every message after ``starts`` in ``logs`` (``options``: etcd connection);
    the topics of ``decode_topics`` (a JSON or AVRO schema) with their payload fields."""
    result = ReadResult()
    if not logs:
        return result
    spark.sparkContext.setJobGroup(group, "folio statistics run", interruptOnCancel=True)
    plain = sorted({log.topic for log in logs} - decode_topics)
    # one read of every topic without a JSON/AVRO schema; one decode=true read per topic with
    # one (each has its own ``decoded`` struct); their partial profiles are one Spark job
    reads = ([(",".join(plain), False)] if plain else []) + [
        (topic, True) for topic in sorted(decode_topics & {log.topic for log in logs})
    ]
    try:
        partials = None
        for topics, decode in reads:
            frame = (
                spark.read.format("folio")
                .options(**options)
                .option("topics", topics)
                .option("startingOffsets", starting_offsets(logs, starts))
                .option("decode", "true" if decode else "false")
                # a stored position retention has since deleted: read from the log's first message
                # (the next run sees the ledger gone from the stored state and reads the partition anew)
                .option("failOnDataLoss", "false")
                .load()
            )
            columns = [f"{expr} AS {name}" for name, expr in COLUMNS.items()] + ([DECODED] if decode else [])
            folded = frame.selectExpr(*columns).mapInArrow(fold_partials, PARTIAL_SCHEMA)
            partials = folded if partials is None else partials.unionByName(folded)
        rows = partials.collect() if partials is not None else []
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    by_name = {log.name: log for log in logs}
    for row in rows:
        log = by_name.get(
            row["topic"] if row["partition"] < 0 else f"{row['topic']}{PARTITION_SUFFIX}{row['partition']}"
        )
        if log is None:
            continue  # a partition created since the listing: the next run reads it
        partial = Profile.from_json(orjson.loads(row["profile"]), bounds)
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
    return result


def job_progress(spark: Any, group: str) -> tuple[int, int]:
    """(tasks done, tasks in all) of the jobs of ``group`` so far."""
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done, total
