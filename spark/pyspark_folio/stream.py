"""The stream reader: ``spark.readStream.format("folio")``.

Owns: ``FolioStreamReader`` - offsets, admission control and planning of each
micro-batch - and ``admit``, the driver-side count that places a batch's end.
Rules:
- an offset is ``{partition's full name: "L:E:B"}``, the next message to read of
  every partition; Spark keeps it in the checkpoint, so a restarted query
  resumes exactly where the last committed batch ended (the checkpoint is the
  truth: nothing is kept here between calls, and ``commit`` does nothing);
- every ``latestOffset`` lists the topics again: a partition or matching topic
  that is new since the start offset is read from its beginning;
- the end of a partition is its LAC now (never past it); with
  ``maxMessagesPerTrigger`` (also under ``availableNow``) the batch admits at
  most that many messages over all partitions, split evenly among those with
  data, counted by reading the entries concerned on the driver and cut inside
  an entry if need be;
- a start position whose ledger retention removed is data loss
  (``failOnDataLoss``: fail the query, or go on from the first message kept).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pyspark_folio.batch import read_range, time_filter
from pyspark_folio.decode import DecodeSpec
from pyspark_folio.logs import open_client, read_entries, snapshot_logs
from pyspark_folio.options import ReadOptions
from pyspark_folio.plan import LogSnapshot, ReadRange, plan_ranges, resolve_start
from pyspark_folio.positions import EARLIEST, Pos, offsets_from_json, offsets_json, spec_for
from storage.client import LedgerClient
from storage.formats.entry_format import entry_message_count


class FolioStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions, decode: DecodeSpec | None = None) -> None:
        self._options = options
        self._decode = decode
        self._available_now: dict[str, Pos] | None = None

    # ------------------------------------------------------------ offsets (driver)

    def initialOffset(self) -> dict[str, str]:
        return asyncio.run(self._initial())

    async def _initial(self) -> dict[str, str]:
        options = self._options
        async with open_client(options.connection) as (store, client):
            snapshots = await snapshot_logs(store, client, options)
        return offsets_json(
            {
                s.log.name: resolve_start(
                    s, spec_for(s.log, options.starting_default, options.starting), options.fail_on_data_loss
                )
                for s in snapshots
            }
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_messages_per_trigger is not None:
            return ReadMaxRows(self._options.max_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = asyncio.run(self._ends())

    async def _ends(self) -> dict[str, Pos]:
        async with open_client(self._options.connection) as (store, client):
            return {s.log.name: s.end for s in await snapshot_logs(store, client, self._options)}

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        return asyncio.run(self._latest(offsets_from_json(start), limit))

    async def _latest(self, start: dict[str, Pos], limit: ReadLimit) -> dict[str, str]:
        options = self._options
        async with open_client(options.connection) as (store, client):
            snapshots = await snapshot_logs(store, client, options)
            begin: dict[str, Pos] = {}
            end: dict[str, Pos] = {}
            for s in snapshots:
                name = s.log.name
                position = start.get(name)
                begin[name] = (
                    EARLIEST if position is None else resolve_start(s, position, options.fail_on_data_loss)
                )
                target = s.end
                if self._available_now is not None:
                    target = min(target, self._available_now.get(name, EARLIEST))
                end[name] = max(target, begin[name])
            if isinstance(limit, ReadMaxRows):
                waiting = [s for s in snapshots if end[s.log.name] > begin[s.log.name]]
                for i, s in enumerate(waiting):
                    quota = limit.max_rows // len(waiting) + (1 if i < limit.max_rows % len(waiting) else 0)
                    if quota == 0:
                        end[s.log.name] = begin[s.log.name]
                    else:
                        end[s.log.name] = min(
                            end[s.log.name], await admit(client, s, begin[s.log.name], quota)
                        )
        # a partition whose start was lost keeps its original start until the batch reads past it
        return offsets_json(
            {name: max(end[name], start.get(name, EARLIEST)) for name in end}
            | {name: position for name, position in start.items() if name not in end}
        )

    # ------------------------------------------------------------ batches

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[InputPartition]:
        return asyncio.run(self._plan(offsets_from_json(start), offsets_from_json(end)))

    async def _plan(self, start: dict[str, Pos], end: dict[str, Pos]) -> list[InputPartition]:
        options = self._options
        async with open_client(options.connection) as (store, client):
            snapshots = await snapshot_logs(store, client, options)
        planned = []
        for s in snapshots:
            if s.log.name not in end:
                continue
            position = start.get(s.log.name, EARLIEST)
            begin = resolve_start(s, position, options.fail_on_data_loss)
            planned.append((s, begin, end[s.log.name]))
        return list(
            plan_ranges(planned, time_filter(options), options.entries_per_range, options.bytes_per_range)
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadRange):
            return  # nothing planned: Spark runs one InputPartition(None)
        yield from read_range(
            self._options.connection, partition, self._options.fail_on_data_loss, self._decode
        )

    def commit(self, end: dict[str, str]) -> None:
        """Nothing to do: Folio keeps no state for a stream (the checkpoint has it)."""


async def admit(client: LedgerClient, snapshot: LogSnapshot, start: Pos, quota: int) -> Pos:
    """The position ``quota`` messages after ``start`` (or the log's end if fewer)."""
    remaining = quota
    for span in snapshot.ledgers:
        if span.ledger_id < start.ledger_id or span.last_entry < 0:
            continue
        same = span.ledger_id == start.ledger_id
        first = max(start.entry_id, 0) if same else 0
        skip = start.batch_index if same and start.entry_id >= 0 else 0
        if first > span.last_entry:
            continue
        async for chunk in read_entries(client, span.ledger_id, first, span.last_entry):
            for entry_id, payload in chunk:
                count = entry_message_count(payload)
                low = skip if entry_id == first else 0
                if count - low >= remaining:
                    cut = low + remaining
                    return (
                        Pos(span.ledger_id, entry_id, cut)
                        if cut < count
                        else Pos(span.ledger_id, entry_id + 1, 0)
                    )
                remaining -= count - low
    return snapshot.end
