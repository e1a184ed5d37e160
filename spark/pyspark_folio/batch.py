"""The batch reader: ``spark.read.format("folio")``.

Owns: ``FolioBatchReader`` (planning on the driver, reading in the tasks) and
``read_range``, the task side shared with the stream reader. Rules: the driver
plans from etcd metadata and the open ledgers' LAC once, in ``partitions()``
(plan.py); a task opens its own etcd store and ledger client, reads its range
from the storage nodes in byte-bounded chunks and yields Arrow RecordBatches
(rows.py), so its memory is bounded by a chunk plus a batch. A ledger that is
gone by the time a task reads it is data loss (decode=true: the
topic's schema versions are read once per task too): the task fails, or with
``failOnDataLoss=false`` logs it and returns what it has.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from pyspark_folio.decode import DecodeSpec, PayloadDecoder
from pyspark_folio.logs import open_client, read_entries, snapshot_logs
from pyspark_folio.options import Connection, ReadOptions
from pyspark_folio.plan import ReadRange, RowFilter, plan_ranges, resolve_end, resolve_start
from pyspark_folio.positions import spec_for
from pyspark_folio.pushdown import Pushed, push_filters
from pyspark_folio.rows import RowsBuilder, batches
from pyspark_folio.schemas import read_topic_schema
from storage.errors import NoSuchEntry, NoSuchLedger

log = logging.getLogger(__name__)


def time_filter(options: ReadOptions) -> RowFilter:
    return RowFilter(options.starting_timestamp_ms, options.ending_timestamp_ms)


class FolioBatchReader(DataSourceReader):
    """Reads without filter pushdown (Spark applies every filter)."""

    def __init__(self, options: ReadOptions, decode: DecodeSpec | None = None) -> None:
        self._options = options
        self._decode = decode
        self._pushed = Pushed(rows=time_filter(options))

    def partitions(self) -> list[InputPartition]:
        return asyncio.run(self._plan())

    async def _plan(self) -> list[InputPartition]:
        options, pushed = self._options, self._pushed
        async with open_client(options.connection) as (store, client):
            snapshots = await snapshot_logs(store, client, options)
        planned = []
        for snapshot in snapshots:
            if not pushed.selects(snapshot.log.topic, snapshot.log.partition):
                continue
            start = resolve_start(
                snapshot,
                spec_for(snapshot.log, options.starting_default, options.starting),
                options.fail_on_data_loss,
            )
            end = resolve_end(snapshot, spec_for(snapshot.log, options.ending_default, options.ending))
            planned.append((snapshot, start, end))
        ranges: list[InputPartition] = list(
            plan_ranges(planned, pushed.rows, options.entries_per_range, options.bytes_per_range)
        )
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadRange):
            return  # nothing planned: Spark runs one InputPartition(None)
        yield from read_range(
            self._options.connection, partition, self._options.fail_on_data_loss, self._decode
        )


class FolioPushdownReader(FolioBatchReader):
    """Reads with filter pushdown (pushdown.py): Spark calls ``pushFilters`` before
    ``partitions``, so the plan prunes partitions and ledgers."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        self._pushed, rejected = push_filters(list(filters), self._pushed)
        yield from rejected


def read_range(
    connection: Connection, read: ReadRange, fail_on_data_loss: bool, decode: DecodeSpec | None = None
) -> Iterator[pa.RecordBatch]:
    """The messages of ``read`` as RecordBatches (runs in a Spark task); with
    ``decode``, the topic's schema versions are read from etcd once per task."""
    loop = asyncio.new_event_loop()
    context = open_client(connection)
    try:
        store, client = loop.run_until_complete(context.__aenter__())
        decoder = None
        if decode is not None:
            topic_schema = loop.run_until_complete(read_topic_schema(store, read.log.topic))
            decoder = PayloadDecoder(decode, topic_schema)
        builder = RowsBuilder(read, decoder=decoder)
        chunks = read_entries(client, read.ledger_id, read.first_entry, read.last_entry)

        def entries() -> Iterator[tuple[int, bytes]]:
            while True:
                try:
                    chunk = loop.run_until_complete(anext(chunks))
                except StopAsyncIteration:
                    return
                except (NoSuchLedger, NoSuchEntry) as exc:
                    if fail_on_data_loss:
                        raise
                    log.warning("%s ledger %d: data lost (%s); skipped", read.log.name, read.ledger_id, exc)
                    return
                yield from chunk

        yield from batches(read, entries(), builder)
    finally:
        loop.run_until_complete(context.__aexit__(None, None, None))
        loop.close()
