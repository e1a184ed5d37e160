"""The connector's rows: the Spark schema and entries -> Arrow record batches (pure).

Owns: ``SCHEMA`` (the columns every Folio read returns), ``ARROW_SCHEMA`` (the
exact Arrow form Spark expects of it) and ``RowsBuilder``, which decodes entries
(storage.formats.entry_format) into columns and cuts them into RecordBatches.
Rules: ``message_id`` is the base64 id a WebSocket consumer gets for the same
message (storage.formats.message_id); ``batch_index`` is the message's index in
its entry; times are UTC timestamps; ``schema_version`` is the topic schema
version the message was written with, read from the entry itself
(docs/decisions/0010-schema-registry.md), as Pulsar's 8 big-endian bytes of a
long, null for a message written without a schema; with decode=true a
``decoded`` struct column follows (decode.py); a task keeps only the messages its ``ReadRange`` bounds and
``RowFilter`` select. A batch is cut at ``rows_max`` rows or ``bytes_max`` payload
bytes, whichever comes first, so a task's memory is bounded whatever the ledger.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pybase64 import b64encode_as_string
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_folio.decode import DECODED, DecodeSpec, PayloadDecoder
from pyspark_folio.plan import ReadRange
from storage.formats.entry_format import decode_entry
from storage.formats.message_id import NO_BATCH_TAIL, batch_tail, entry_prefix

SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("message_id", StringType(), False),
        StructField("ledger_id", LongType(), False),
        StructField("entry_id", LongType(), False),
        StructField("batch_index", IntegerType(), False),
        StructField("key", StringType(), True),
        StructField("value", BinaryType(), False),
        StructField("properties", MapType(StringType(), StringType(), False), False),
        StructField("publish_time", TimestampType(), False),
        StructField("event_time", TimestampType(), True),
        StructField("producer", StringType(), False),
        StructField("sequence_id", LongType(), False),
        StructField("schema_version", BinaryType(), True),
    ]
)
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
ROWS_MAX = 65_536
BYTES_MAX = 16 * 1024 * 1024
_MS_TO_US = 1000


def schema_for(decode: DecodeSpec | None) -> StructType:
    """The read's columns: ``SCHEMA``, plus ``decoded`` with decode=true."""
    if decode is None:
        return SCHEMA
    return StructType([*SCHEMA.fields, StructField(DECODED, decode.struct, True)])


class RowsBuilder:
    """Columns of the messages of one range, handed out as RecordBatches."""

    def __init__(
        self,
        read: ReadRange,
        rows_max: int = ROWS_MAX,
        bytes_max: int = BYTES_MAX,
        decoder: PayloadDecoder | None = None,
    ) -> None:
        self._read = read
        self._decoder = decoder
        self._arrow = (
            ARROW_SCHEMA if decoder is None else to_arrow_schema(schema_for(decoder.spec), timezone="UTC")
        )
        self._rows_max = rows_max
        self._bytes_max = bytes_max
        self._partition_for_id = max(read.log.partition, -1)
        self._reset()

    def _reset(self) -> None:
        self._ids: list[str] = []
        self._entries: list[int] = []
        self._indexes: list[int] = []
        self._keys: list[str | None] = []
        self._values: list[bytes] = []
        self._props: list[list[tuple[str, str]]] = []
        self._publish: list[int] = []
        self._event: list[int | None] = []
        self._producers: list[str] = []
        self._sequences: list[int] = []
        self._schemas: list[bytes | None] = []
        self._decoded: list[dict[str, object] | None] = []
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def full(self) -> bool:
        return len(self._ids) >= self._rows_max or self._bytes >= self._bytes_max

    def add_entry(self, entry_id: int, payload: bytes) -> None:
        """The entry's selected messages, added column by column (a list operation per
        column and entry, not a dozen appends per message: this runs for every message
        a read returns)."""
        read = self._read
        messages = decode_entry(payload)
        count = len(messages)
        low = read.first_batch if entry_id == read.first_entry else 0
        high = read.stop_batch if entry_id == read.last_entry and read.stop_batch is not None else count
        indexes = list(range(low, min(high, count)))
        chosen = messages[low : low + len(indexes)]
        rows = read.rows
        if rows.publish_min_ms is not None or rows.publish_max_ms is not None:
            least = rows.publish_min_ms if rows.publish_min_ms is not None else -(2**63)
            most = rows.publish_max_ms if rows.publish_max_ms is not None else 2**63
            kept = [j for j, m in enumerate(chosen) if least <= m.publish_time_ms <= most]
            indexes, chosen = [indexes[j] for j in kept], [chosen[j] for j in kept]
        keys = [None if m.key is None else m.key.decode("utf-8", "replace") for m in chosen]
        if rows.keys is not None:
            wanted = rows.keys
            kept = [j for j, key in enumerate(keys) if key in wanted]
            indexes, chosen, keys = (
                [indexes[j] for j in kept],
                [chosen[j] for j in kept],
                [keys[j] for j in kept],
            )
        if not chosen:
            return
        prefix = entry_prefix(read.ledger_id, entry_id, self._partition_for_id)
        if count > 1:
            self._ids += [b64encode_as_string(prefix + batch_tail(i, count)) for i in indexes]
        else:
            self._ids.append(b64encode_as_string(prefix + NO_BATCH_TAIL))
        self._entries += [entry_id] * len(chosen)
        self._indexes += indexes
        self._keys += keys
        values = [m.payload for m in chosen]
        self._values += values
        self._props += [list(m.properties.items()) if m.properties else [] for m in chosen]
        self._publish += [m.publish_time_ms * _MS_TO_US for m in chosen]
        self._event += [None if m.event_time_ms is None else m.event_time_ms * _MS_TO_US for m in chosen]
        self._producers += [m.producer_name for m in chosen]
        self._sequences += [m.sequence_id for m in chosen]
        self._schemas += [
            None if m.schema_version is None else m.schema_version.to_bytes(8, "big", signed=True)
            for m in chosen
        ]
        if self._decoder is not None:
            decode = self._decoder.decode
            self._decoded += [decode(m.schema_version, m.payload) for m in chosen]
        self._bytes += sum(map(len, values))

    def take(self) -> pa.RecordBatch:
        """The rows gathered so far as one RecordBatch (and start afresh)."""
        n = len(self._ids)
        read = self._read
        columns: Sequence[pa.Array] = [
            pa.array([read.log.topic] * n, pa.string()),
            pa.array([read.log.partition] * n, pa.int32()),
            pa.array(self._ids, pa.string()),
            pa.array([read.ledger_id] * n, pa.int64()),
            pa.array(self._entries, pa.int64()),
            pa.array(self._indexes, pa.int32()),
            pa.array(self._keys, pa.string()),
            pa.array(self._values, pa.binary()),
            pa.array(self._props, ARROW_SCHEMA.field("properties").type),
            pa.array(self._publish, ARROW_SCHEMA.field("publish_time").type),
            pa.array(self._event, ARROW_SCHEMA.field("event_time").type),
            pa.array(self._producers, pa.string()),
            pa.array(self._sequences, pa.int64()),
            pa.array(self._schemas, pa.binary()),
        ]
        if self._decoder is not None:
            columns = [*columns, pa.array(self._decoded, self._arrow.field(DECODED).type)]
        self._reset()
        return pa.RecordBatch.from_arrays(list(columns), schema=self._arrow)


def batches(
    read: ReadRange, entries: Iterator[tuple[int, bytes]], builder: RowsBuilder
) -> Iterator[pa.RecordBatch]:
    """RecordBatches of the messages in ``entries`` ((entry id, payload) in order)."""
    for entry_id, payload in entries:
        builder.add_entry(entry_id, payload)
        if builder.full:
            yield builder.take()
    if len(builder):
        yield builder.take()
