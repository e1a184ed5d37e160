"""The writers: ``df.write.format("folio")`` and ``writeStream.format("folio")``.

Owns: ``FolioBatchWriter``, ``FolioStreamWriter`` and ``publish_rows``, the task
side both share. Rules:
- rows are published through the gateways' REST batch publish
  (``POST /topics/<topic>``, up to ``batchMessages`` messages a request), each
  task on one gateway (task index modulo the live gateways); a task sends one
  request at a time per partition it writes to (the partitions in parallel), so
  sequence ids reach each partition in order and the usual acks hold: a row
  counts only once its gateway answered it stored;
- each task is one producer per partition it writes to: the producer name is
  the writer's name plus the task's partition id; the sequence id of a row is
  its position in the task (plus, for a stream, the batch id << 32); a row goes
  to the partition its key hashes to (storage.formats.key_routing, as the
  gateways route keys), a row without key to ``position mod partitions``. A task
  that Spark retries, or a streaming batch replayed after a failure, sends the
  same rows with the same producer, partition and sequence ids, so a namespace
  with dedup on stores each row once. With dedup off such a retry stores the
  rows it had already sent again (at-least-once);
- a message answered retriable, or a request that failed in transit, is sent
  again (the whole request if its outcome is unknown) with the same ids.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import orjson
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from coordination import keys
from coordination.etcd_store import connect
from pyspark_folio.names import PARTITION_SUFFIX, path_of
from pyspark_folio.options import Connection, WriteOptions
from storage.formats import producer_messages
from storage.formats.key_routing import partition_of_key

SEQUENCE_BATCH_SHIFT = 32  # a streaming row's sequence id: batch id << 32 | position in the task
ATTEMPTS_MAX = 20
RETRY_DELAY_S = 0.25
LANE_QUEUED = 2  # requests of one target waiting or in flight (bounds a task's memory)


@dataclass
class PublishedCount(WriterCommitMessage):
    partition_id: int
    rows: int
    duplicates: int


class PublishFailed(Exception):
    """A gateway refused rows for good, or none answered after every attempt."""


def _gateways(connection: Connection, given: tuple[str, ...]) -> tuple[str, ...]:
    if given:
        return given

    async def live() -> tuple[str, ...]:
        store = await connect(connection.etcd, namespace=connection.etcd_namespace)
        try:
            items = await store.list_prefix(keys.GATEWAYS)
        finally:
            await store.close()
        return tuple(sorted(orjson.loads(kv.value)["httpUrl"].rstrip("/") for kv in items))

    found = asyncio.run(live())
    if not found:
        raise PublishFailed("no live gateway is registered in etcd")
    return found


def _partition_counts(connection: Connection, topics: set[str]) -> dict[str, int]:
    async def read() -> dict[str, int]:
        store = await connect(connection.etcd, namespace=connection.etcd_namespace)
        try:
            counts = {}
            for topic in topics:
                kv = await store.get(keys.partitioned(path_of(topic)))
                counts[topic] = int(orjson.loads(kv.value)["partitions"]) if kv is not None else 0
            return counts
        finally:
            await store.close()

    return asyncio.run(read())


class _Sender:
    """One task's publishing: buffers per target log; each target's requests go out
    one at a time in order (its own thread), the targets in parallel."""

    def __init__(self, options: WriteOptions, gateway: str, producer: str) -> None:
        self._options = options
        self._gateway = gateway
        self._producer = producer
        self._http = httpx.Client(timeout=60.0)
        self._buffers: dict[str, list[dict[str, Any]]] = {}
        self._bytes: dict[str, int] = {}
        self._lanes: dict[str, ThreadPoolExecutor] = {}
        self._pending: dict[str, list[Future[tuple[int, int]]]] = {}
        self.rows = 0
        self.duplicates = 0

    def add(self, target: str, message: dict[str, Any], size: int) -> None:
        buffer = self._buffers.setdefault(target, [])
        buffer.append(message)
        self._bytes[target] = self._bytes.get(target, 0) + size
        if len(buffer) >= self._options.batch_messages or self._bytes[target] >= self._options.batch_bytes:
            self.flush(target)

    def flush(self, target: str) -> None:
        """Hand the target's buffer to its lane; at most LANE_QUEUED requests wait."""
        messages = self._buffers.pop(target, [])
        self._bytes.pop(target, None)
        if not messages:
            return
        lane = self._lanes.get(target)
        if lane is None:
            lane = self._lanes[target] = ThreadPoolExecutor(max_workers=1)
        pending = self._pending.setdefault(target, [])
        while len(pending) >= LANE_QUEUED:
            self._count(pending.pop(0).result())
        pending.append(lane.submit(self._send, target, messages))

    def _count(self, done: tuple[int, int]) -> None:
        self.rows += done[0]
        self.duplicates += done[1]

    def _send(self, target: str, messages: list[dict[str, Any]]) -> tuple[int, int]:
        url = f"{self._gateway}/topics/{path_of(target)}?markDuplicates=true"  # counts duplicates
        stored = duplicates = 0
        for attempt in range(ATTEMPTS_MAX):
            if not messages:
                return stored, duplicates
            if attempt:
                time.sleep(RETRY_DELAY_S)
            try:
                reply = self._http.post(
                    url,
                    content=orjson.dumps(producer_messages.body(self._producer, messages)),
                    headers={"content-type": "application/json"},
                )
            except httpx.TransportError:
                continue  # outcome unknown: send all again with the same ids
            if reply.status_code >= 500 or reply.status_code == 429:
                continue
            if reply.status_code != 200:
                raise PublishFailed(f"{url}: HTTP {reply.status_code}: {reply.text[:300]}")
            results = orjson.loads(reply.content)["messagePublishResults"]
            again = []
            for message, result in zip(messages, results, strict=True):
                code = result.get("errorCode", 0)
                if code == 0:
                    stored += 1
                    duplicates += 1 if result.get("duplicate") else 0
                elif code == 1:
                    again.append(message)
                else:
                    raise PublishFailed(f"{url}: {result.get('errorMsg')}")
            messages = again
        if messages:
            raise PublishFailed(f"{url}: {len(messages)} messages not stored after {ATTEMPTS_MAX} attempts")
        return stored, duplicates

    def finish(self) -> None:
        """Publish what is buffered and wait for every answer (the first failure is raised)."""
        for target in list(self._buffers):
            self.flush(target)
        for pending in self._pending.values():
            while pending:
                self._count(pending.pop(0).result())

    def close(self) -> None:
        for lane in self._lanes.values():
            lane.shutdown(wait=True, cancel_futures=True)
        self._http.close()


def _ms(value: Any) -> int:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def publish_rows(
    options: WriteOptions,
    gateways: tuple[str, ...],
    producer_prefix: str,
    sequence_base: int,
    rows: Iterator[Row],
) -> PublishedCount:
    """Publish one task's rows (see the module rules)."""
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    sender = _Sender(options, gateways[partition_id % len(gateways)], f"{producer_prefix}-{partition_id}")
    counts: dict[str, int] = {}
    try:
        for position, row in enumerate(rows):
            fields = row.asDict()
            topic = options.topic or fields.get("topic")
            if not topic:
                raise PublishFailed("a row has no topic (give the option topic or a topic column)")
            if topic not in counts:
                counts.update(_partition_counts(options.connection, {topic}))
            value = fields.get("value")
            payload = value.encode() if isinstance(value, str) else bytes(value or b"")
            key = fields.get("key")
            event_time = fields.get("event_time")
            message = producer_messages.message(
                payload,
                key=key,
                properties=fields.get("properties"),
                sequence_id=sequence_base + position,
                event_time_ms=_ms(event_time) if event_time is not None else None,
            )
            target = topic
            partitions = counts[topic]
            if partitions:
                index = partition_of_key(key, partitions) if key is not None else position % partitions
                target = f"{topic}{PARTITION_SUFFIX}{index}"
            sender.add(target, message, len(payload))
        sender.finish()
    finally:
        sender.close()
    return PublishedCount(partition_id, sender.rows, sender.duplicates)


def _check_schema(schema: StructType, options: WriteOptions) -> None:
    names = set(schema.fieldNames())
    if "value" not in names:
        raise ValueError("rows to write need a value column (binary or string)")
    if options.topic is None and "topic" not in names:
        raise ValueError("give the option topic or a topic column")


class FolioBatchWriter(DataSourceWriter):
    """``df.write``: one producer name per job (a fresh id), so every job's rows are new."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError("a topic is a log: only append mode writes to it")
        _check_schema(schema, options)
        self._options = options
        self._gateways = _gateways(options.connection, options.gateways)
        self._producer = options.producer_name or f"spark-{uuid.uuid4().hex[:12]}"

    def write(self, iterator: Iterator[Row]) -> PublishedCount:
        return publish_rows(self._options, self._gateways, self._producer, 0, iterator)


class FolioStreamWriter(DataSourceStreamWriter):
    """``writeStream``: the producer name must outlive a query restart to make replays
    duplicates: the option producerName, else the query's id (kept in its checkpoint)."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        _check_schema(schema, options)
        self._options = options
        self._gateways = _gateways(options.connection, options.gateways)

    def write(self, iterator: Iterator[Row]) -> PublishedCount:
        context = TaskContext.get()
        assert context is not None
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or 0)
        producer = self._options.producer_name or f"spark-{context.getLocalProperty('sql.streaming.queryId')}"
        return publish_rows(
            self._options, self._gateways, producer, batch_id << SEQUENCE_BATCH_SHIFT, iterator
        )
