"""The writers: ``df.write.format("folio")`` and ``writeStream.format("folio")``.

Owns: ``FolioBatchWriter``, ``FolioStreamWriter`` and ``publish_batches``, the
task side both share. Rules:
- Spark hands a task its rows as Arrow batches; ``write_frames`` turns them into
  frame bodies a column at a time; the task publishes them through
  the gateways' WebSocket producer with Folio batch frames (docs/publishing.md
  §4, up to ``batchMessages`` messages / ``batchBytes`` payload bytes a frame),
  one producer session per partition it writes to, on that partition's owner
  (looked up on any live gateway, starting with task index modulo the
  gateways), the sessions in one asyncio loop;
- the task pulls its rows from Spark in a thread, so frames go out and replies
  come in while Spark computes the next rows;
- each session keeps many frames in flight; replies come in order and are
  matched to frames by number (``write_window``); a row counts only once its
  gateway answered it stored (fsynced on an ack quorum);
- the task's unacknowledged frames are bounded by ``bytesInFlight`` (all its
  partitions together): past it the task reads no more rows until replies
  free room;
- each task is one producer per partition it writes to: the producer name is
  the writer's name plus the task's partition id; the sequence id of a row is
  its position in the task (plus, for a stream, the batch id << 32); a row goes
  to the partition its key hashes to (storage.formats.key_routing, as the
  gateways route keys), a row without key to ``position mod partitions``;
- a session that ends (connection lost, gateway gone, topic moved or unloaded:
  4503, a retriable failure) is opened again - to the owner looked up anew, on
  another gateway if one does not answer - and every unacknowledged frame is
  sent again in order with the same producer name and sequence ids. A task that
  Spark retries, or a streaming batch replayed after a failure, sends the same
  rows with the same producer, partition and sequence ids. So a namespace with
  dedup on stores each row once; with dedup off a resend stores again what had
  been stored but not yet answered (at-least-once);
- a task fails when a gateway refuses a message for good, or when a partition
  makes no progress for ``STALL_S`` while sessions keep failing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus, WebSocketException

from coordination import keys
from pyspark_folio.logs import connect_store
from pyspark_folio.names import PARTITION_SUFFIX, path_of
from pyspark_folio.options import Connection, WriteOptions
from pyspark_folio.write_frames import Pending, encode_messages, route
from pyspark_folio.write_window import Budget, ReplyError, Verdict, Window

SEQUENCE_BATCH_SHIFT = 32  # a streaming row's sequence id: batch id << 32 | position in the task
STALL_S = 120.0  # a partition without an acknowledged frame this long, sessions failing: the task fails
RETRY_FIRST_S = 0.1  # first pause before a session is opened again (doubling up to RETRY_MAX_S)
RETRY_MAX_S = 2.0
CONNECT_S = 30.0
REPLY_MAX = 16 * 1024 * 1024  # a reply frame larger than this ends the session (1,000 results fit easily)
RETRY_STATUS = {409, 429}  # a handshake refused with these (or 5xx) is tried again: producer busy, overload


@dataclass
class PublishedCount(WriterCommitMessage):
    partition_id: int
    rows: int
    duplicates: int


class PublishFailed(Exception):
    """A gateway refused rows for good, or a partition made no progress for ``STALL_S``."""


def _gateways(connection: Connection, given: tuple[str, ...]) -> tuple[str, ...]:
    if given:
        return given

    async def live() -> tuple[str, ...]:
        store = await connect_store(connection)
        try:
            items = await store.list_prefix(keys.GATEWAYS)
        finally:
            await store.close()
        return tuple(sorted(orjson.loads(kv.value)["httpUrl"].rstrip("/") for kv in items))

    found = asyncio.run(live())
    if not found:
        raise PublishFailed("no live gateway is registered in etcd")
    return found


async def _partition_count(connection: Connection, topic: str) -> int:
    """The topic's partitions (0: not partitioned), from etcd."""
    store = await connect_store(connection)
    try:
        kv = await store.get(keys.partitioned(path_of(topic)))
    finally:
        await store.close()
    return int(orjson.loads(kv.value)["partitions"]) if kv is not None else 0


class _Lane:
    """One partition's producer session, opened again whenever it ends (module rules)."""

    def __init__(
        self, target: str, producer: str, gateways: tuple[str, ...], first: int, task: _Task
    ) -> None:
        self.target = target
        self.path = path_of(target)
        self.producer = producer
        self.gateways = gateways
        self.gateway = first  # index of the gateway asked for the owner
        self.task = task
        self.window = Window()
        self.wake = asyncio.Event()
        self.closing = False
        self.sessions = 0
        self.runner = asyncio.get_running_loop().create_task(self._run())

    def push(self, body: bytes, count: int) -> None:
        frame = self.window.add(body, count)
        self.task.budget.take(frame.size)
        self.wake.set()

    def finish(self) -> None:
        self.closing = True
        self.wake.set()

    async def _owner(self, http: httpx.AsyncClient) -> str:
        base = self.gateways[self.gateway % len(self.gateways)]
        reply = await http.get(f"{base}/lookup/v2/topic/{self.path}")
        reply.raise_for_status()
        ws_base = str(reply.json()["brokerUrl"]).rstrip("/")
        query = urlencode({"producerName": self.producer, "markDuplicates": "true"})
        return f"{ws_base}/ws/v2/producer/{self.path}?{query}"

    async def _run(self) -> None:
        progress_at = time.monotonic()
        pause = RETRY_FIRST_S
        last = "no session opened"
        async with httpx.AsyncClient(timeout=CONNECT_S) as http:
            while not (self.closing and not self.window.frames):
                stored = self.window.stored
                try:
                    await self._session(await self._owner(http))
                except InvalidStatus as exc:
                    status = exc.response.status_code
                    if status < 500 and status not in RETRY_STATUS:
                        body = exc.response.body.decode(errors="replace")[:300] if exc.response.body else ""
                        refused = f"{self.target}: producer refused, HTTP {status}: {body}"
                        raise PublishFailed(refused) from exc
                    last = f"HTTP {status}"
                except (OSError, TimeoutError, WebSocketException, httpx.HTTPError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    self.gateway += 1  # ask another gateway for the owner next time
                except ReplyError as exc:
                    raise PublishFailed(f"{self.target}: {exc}") from exc
                if self.window.stored > stored:
                    progress_at = time.monotonic()
                    pause = RETRY_FIRST_S
                if self.closing and not self.window.frames:
                    return
                if time.monotonic() - progress_at > STALL_S:
                    raise PublishFailed(f"{self.target}: nothing stored for {STALL_S:.0f} s; last: {last}")
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX_S)

    async def _session(self, url: str) -> None:
        """One session: send every frame in the window, then new ones as they come;
        take replies until the window is empty and the task is done, or the session ends."""
        async with ws_connect(
            url, open_timeout=CONNECT_S, max_size=REPLY_MAX, compression=None, close_timeout=2.0
        ) as ws:
            self.sessions += 1
            self.window.session_ended()
            sender = asyncio.get_running_loop().create_task(self._send(ws))
            try:
                if self.closing and not self.window.frames:
                    return
                async for raw in ws:
                    verdict, freed = self.window.take(raw)
                    if freed:
                        self.task.freed(freed)
                    if verdict is Verdict.RESEND:
                        return  # the gateway ends the session too; the window goes out again
                    if self.closing and not self.window.frames:
                        return
            finally:  # a failed send ends the session too: the receive side sees it
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)

    async def _send(self, ws: ClientConnection) -> None:
        """Send frames as they come; once the task is done and every frame is answered,
        close the session: no reply is coming then to end the receive side (the window
        can empty before the task finishes, when its last rows filled whole frames)."""
        while True:
            self.wake.clear()
            frames = self.window.unsent()
            for frame in frames:
                await ws.send(frame.data, text=True)
            if not frames:
                if self.closing:
                    if not self.window.frames:
                        await ws.close()
                    return
                await self.wake.wait()


class _Task:
    """One task's lanes and byte budget."""

    def __init__(self, options: WriteOptions, gateways: tuple[str, ...], producer: str, first: int) -> None:
        self.options = options
        self.gateways = gateways
        self.producer = producer
        self.first = first
        self.budget = Budget(options.bytes_in_flight)
        self.room = asyncio.Event()
        self.lanes: dict[str, _Lane] = {}

    def freed(self, size: int) -> None:
        self.budget.give(size)
        if not self.budget.over:
            self.room.set()

    def _failure(self) -> BaseException | None:
        for lane in self.lanes.values():
            if lane.runner.done() and not lane.runner.cancelled():
                exc = lane.runner.exception()
                if exc is not None:
                    return exc
        return None

    async def send(self, target: str, body: bytes, count: int) -> None:
        """Queue one frame for ``target``; wait while the task holds more than its budget."""
        lane = self.lanes.get(target)
        if lane is None:
            lane = self.lanes[target] = _Lane(target, self.producer, self.gateways, self.first, self)
        lane.push(body, count)
        while self.budget.over:
            failure = self._failure()
            if failure is not None:
                raise failure
            self.room.clear()
            try:
                await asyncio.wait_for(self.room.wait(), 1.0)  # wakes up to look at failures
            except TimeoutError:
                pass

    async def finish(self) -> tuple[int, int]:
        """Wait until every frame is acknowledged; (rows stored, of which duplicates)."""
        for lane in self.lanes.values():
            lane.finish()
        try:
            await asyncio.gather(*(lane.runner for lane in self.lanes.values()))
        finally:
            for lane in self.lanes.values():
                lane.runner.cancel()
        windows = [lane.window for lane in self.lanes.values()]
        return sum(w.stored for w in windows), sum(w.duplicates for w in windows)


async def _publish(
    task: _Task, options: WriteOptions, sequence_base: int, batches: Iterator[pa.RecordBatch]
) -> int:
    """Route every row of ``batches`` into frames per partition (write_frames); returns the rows read."""
    counts: dict[str, int] = {}
    pending: dict[str, Pending] = {}
    limits = options.batch_messages, options.batch_bytes
    position = 0
    rows_in = iter(batches)
    while True:
        # Spark computes the rows while they are pulled: pulled in a thread, the loop keeps
        # sending frames and taking replies meanwhile
        batch = await asyncio.to_thread(next, rows_in, None)
        if batch is None:
            break
        if not len(batch):
            continue
        messages, lengths = encode_messages(batch, sequence_base + position)
        index = batch.schema.get_field_index("key")
        keys_ = batch.column(index) if index >= 0 else None
        for topic, rows in _by_topic(batch, options.topic):
            if topic not in counts:
                counts[topic] = await _partition_count(options.connection, topic)
            partitions = counts[topic]
            if not partitions:
                _queue(pending, topic, messages, lengths, rows)
                continue
            chosen = route(None if keys_ is None else keys_.take(rows), position + rows, partitions)
            order = np.argsort(chosen, kind="stable")
            sorted_ = chosen[order]
            cuts = np.flatnonzero(np.diff(sorted_)) + 1
            for part in np.split(order, cuts):
                target = f"{topic}{PARTITION_SUFFIX}{int(chosen[part[0]])}"
                _queue(pending, target, messages, lengths, rows[part])
        position += len(batch)
        for target, rows_ in pending.items():
            for body, count in rows_.frames(*limits, final=False):
                await task.send(target, body, count)
    for target, rows_ in pending.items():
        for body, count in rows_.frames(*limits, final=True):
            await task.send(target, body, count)
    return position


def _by_topic(batch: pa.RecordBatch, topic: str | None) -> list[tuple[str, np.ndarray]]:
    """The rows (indices) of ``batch`` per topic: all of them for the option topic."""
    if topic is not None:
        return [(topic, np.arange(len(batch), dtype=np.int64))]
    topics = batch.column(batch.schema.get_field_index("topic"))
    if topics.null_count or not pc.all(pc.greater(pc.utf8_length(topics), 0)).as_py():
        raise PublishFailed("a row has no topic (give the option topic or a topic column)")
    encoded = topics.dictionary_encode()
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    return [(name, np.flatnonzero(indices == i)) for i, name in enumerate(encoded.dictionary.to_pylist())]


def _queue(
    pending: dict[str, Pending], target: str, messages: pa.Array, lengths: np.ndarray, rows: np.ndarray
) -> None:
    whole = len(rows) == len(messages)
    pending.setdefault(target, Pending()).add(
        messages if whole else messages.take(rows), lengths if whole else lengths[rows]
    )


def publish_batches(
    options: WriteOptions,
    gateways: tuple[str, ...],
    producer_prefix: str,
    sequence_base: int,
    batches: Iterator[pa.RecordBatch],
) -> PublishedCount:
    """Publish one task's rows (see the module rules)."""
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0

    async def run() -> PublishedCount:
        task = _Task(options, gateways, f"{producer_prefix}-{partition_id}", partition_id)
        try:
            await _publish(task, options, sequence_base, batches)
            stored, duplicates = await task.finish()
        finally:
            for lane in task.lanes.values():
                lane.runner.cancel()
        return PublishedCount(partition_id, stored, duplicates)

    return asyncio.run(run())


def _check_schema(schema: StructType, options: WriteOptions) -> None:
    names = set(schema.fieldNames())
    if "value" not in names:
        raise ValueError("rows to write need a value column (binary or string)")
    if options.topic is None and "topic" not in names:
        raise ValueError("give the option topic or a topic column")


class FolioBatchWriter(DataSourceArrowWriter):
    """``df.write``: one producer name per job (a fresh id), so every job's rows are new."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError("a topic is a log: only append mode writes to it")
        _check_schema(schema, options)
        self._options = options
        self._gateways = _gateways(options.connection, options.gateways)
        self._producer = options.producer_name or f"spark-{uuid.uuid4().hex[:12]}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedCount:
        return publish_batches(self._options, self._gateways, self._producer, 0, iterator)


class FolioStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream``: the producer name must outlive a query restart to make replays
    duplicates: the option producerName, else the query's id (kept in its checkpoint)."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        _check_schema(schema, options)
        self._options = options
        self._gateways = _gateways(options.connection, options.gateways)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedCount:
        context = TaskContext.get()
        assert context is not None
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or 0)
        producer = self._options.producer_name or f"spark-{context.getLocalProperty('sql.streaming.queryId')}"
        return publish_batches(
            self._options, self._gateways, producer, batch_id << SEQUENCE_BATCH_SHIFT, iterator
        )
