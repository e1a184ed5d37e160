"""The connector's rows: the Spark schema and entries -> Arrow record batches (pure).

Owns: ``SCHEMA`` (the columns every Folio read returns), ``ARROW_SCHEMA`` (the
exact Arrow form Spark expects of it) and ``RowsBuilder``, which decodes entries
into Arrow columns (storage.formats.entry_columns: numpy over all the entries of
a batch, no Python object per message but for ``decoded``) and cuts them into
RecordBatches.
Rules: ``message_id`` is the base64 id a WebSocket consumer gets for the same
message (storage.formats.message_id); ``batch_index`` is the message's index in
its entry; times are UTC timestamps; ``schema_version`` is the topic schema
version the message was written with, read from the entry itself
(docs/decisions/0010-schema-registry.md), as Pulsar's 8 big-endian bytes of a
long, null for a message written without a schema; with decode=true a
``decoded`` struct column follows (decode.py); a task keeps only the messages its ``ReadRange`` bounds and
``RowFilter`` select. A batch is cut at the entry that brings it to ``rows_max``
messages or ``bytes_max`` entry bytes, whichever comes first, so a task's memory
is bounded whatever the ledger.
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
from storage.formats.entry_columns import EntryColumns, Flags, Ints, decode_entries, raise_corrupt
from storage.formats.entry_format import entry_message_count
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
    """Entries of one range, decoded into Arrow columns a batch at a time.

    Entries are kept as they arrive (``add_entry`` reads only their header) and
    ``take`` decodes them all at once (storage.formats.entry_columns): every
    column but ``decoded`` is built from numpy arrays and byte ranges, without a
    Python object per message. ``decoded`` is the one column made per message
    (fastavro / orjson decode a payload at a time)."""

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
        self._entry_ids: list[int] = []
        self._payloads: list[bytes] = []
        self._messages = 0
        self._bytes = 0

    def __len__(self) -> int:
        """Messages held (before the range's bounds and filters select among them)."""
        return self._messages

    @property
    def full(self) -> bool:
        return self._messages >= self._rows_max or self._bytes >= self._bytes_max

    def add_entry(self, entry_id: int, payload: bytes) -> None:
        """Hold the entry until ``take`` (its header is checked now)."""
        self._messages += entry_message_count(payload)
        self._bytes += len(payload)
        self._entry_ids.append(entry_id)
        self._payloads.append(payload)

    def take(self) -> pa.RecordBatch:
        """The selected messages of the entries held as one RecordBatch (and start afresh)."""
        payloads = self._payloads
        entry_ids = np.array(self._entry_ids, np.int64)
        self._reset()
        cols = decode_entries(payloads)
        data = pa.py_buffer(cols.data)
        entry_id = entry_ids[cols.entry]
        keys = _text_or_replaced(_slices(data, cols.key_start, cols.key_len, pa.binary(), cols.has_key))
        chosen = self._select(cols, entry_id, keys)
        everything = len(chosen) == len(cols.entry)
        n = len(chosen)
        read = self._read

        def pick(array: pa.Array) -> pa.Array:
            return array if everything else array.take(pa.array(chosen))

        producers = _strings(payloads, data, cols.name_start, cols.name_len)
        publish = cols.publish_time_ms[chosen] * _MS_TO_US
        event = cols.event_time_ms[chosen] * _MS_TO_US
        columns: list[pa.Array] = [
            pa.repeat(pa.scalar(read.log.topic, pa.string()), n),
            pa.repeat(pa.scalar(read.log.partition, pa.int32()), n),
            self._message_ids(entry_id[chosen], cols.batch_index[chosen], cols.count[cols.entry[chosen]]),
            pa.repeat(pa.scalar(read.ledger_id, pa.int64()), n),
            pa.array(entry_id[chosen], pa.int64()),
            pa.array(cols.batch_index[chosen], pa.int32()),
            pick(keys),
            _slices(data, cols.payload_start[chosen], cols.payload_len[chosen], pa.binary()),
            _properties(payloads, data, cols, chosen),
            pa.array(publish, ARROW_SCHEMA.field("publish_time").type),
            pa.array(event, ARROW_SCHEMA.field("event_time").type, mask=~cols.has_event_time[chosen]),
            pick(producers),
            pa.array(cols.sequence_id[chosen], pa.int64()),
            _versions(cols.schema_version[chosen], cols.has_schema_version[chosen]),
        ]
        if self._decoder is not None:
            decode = self._decoder.decode
            versions = cols.schema_version[chosen].tolist()
            present = cols.has_schema_version[chosen].tolist()
            values = columns[7].to_pylist()
            decoded = [
                decode(v if has else None, p) for v, has, p in zip(versions, present, values, strict=True)
            ]
            columns.append(pa.array(decoded, self._arrow.field(DECODED).type))
        return pa.RecordBatch.from_arrays(columns, schema=self._arrow)

    def _select(self, cols: EntryColumns, entry_id: Ints, keys: pa.Array) -> Ints:
        """The messages the range's bounds and the pushed row filters keep."""
        read, rows = self._read, self._read.rows
        index = cols.batch_index
        keep = ~((entry_id == read.first_entry) & (index < read.first_batch))
        if read.stop_batch is not None:
            keep &= ~((entry_id == read.last_entry) & (index >= read.stop_batch))
        if rows.publish_min_ms is not None:
            keep &= cols.publish_time_ms >= rows.publish_min_ms
        if rows.publish_max_ms is not None:
            keep &= cols.publish_time_ms <= rows.publish_max_ms
        if rows.keys is not None:
            wanted = pc.is_in(keys, value_set=pa.array(sorted(rows.keys), pa.string()))
            keep &= pc.fill_null(wanted, False).to_numpy(zero_copy_only=False)
        return np.flatnonzero(keep)

    def _message_ids(self, entry_id: Ints, batch_index: Ints, batch_size: Ints) -> pa.Array:
        """The base64 ids, as ``MessageId.to_base64``: an entry's prefix (one per entry)
        and the tail of (index, size) (one per size), joined by Arrow with zero bytes
        padding each id to a multiple of 3; one ``binascii`` call then encodes the whole
        batch, each id's text starting at 4/3 of its offset, and only the "=" of each
        id's padding is written afterwards."""
        n = len(entry_id)
        if n == 0:
            return pa.array([], pa.string())
        entries, of_entry = np.unique(entry_id, return_inverse=True)
        ledger, partition = self._read.ledger_id, self._partition_for_id
        prefixes = pa.array([entry_prefix(ledger, e, partition) for e in entries.tolist()], pa.binary())
        sizes, of_size = np.unique(batch_size, return_inverse=True)
        tables = [_tails(size) for size in sizes.tolist()]
        tails = pa.array([tail for table in tables for tail in table], pa.binary())
        table_at = np.cumsum([0] + [len(table) for table in tables[:-1]])
        tail_at = table_at[of_size] + batch_index
        length = pc.binary_length(prefixes).to_numpy()[of_entry] + pc.binary_length(tails).to_numpy()[tail_at]
        rest = length % 3
        joined = pc.binary_join_element_wise(
            prefixes.take(pa.array(of_entry)),
            tails.take(pa.array(tail_at)),
            _PADDING.take(pa.array(-length % 3)),
            b"",
        )
        _, offset_buffer, data_buffer = joined.buffers()
        offsets = np.frombuffer(offset_buffer, np.int32, n + 1, joined.offset * 4)
        padded = memoryview(data_buffer)[offsets[0] : offsets[-1]]
        text = np.frombuffer(binascii.b2a_base64(padded, newline=False), np.uint8).copy()
        out_offsets = (offsets - offsets[0]) // 3 * 4
        ends = out_offsets[1:]
        text[ends[rest == 1] - 2] = ord("=")
        text[ends[rest != 0] - 1] = ord("=")
        return pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(out_offsets.astype(np.int32)), pa.py_buffer(text)]
        )


_PADDING = pa.array([b"", b"\0", b"\0\0"], pa.binary())  # by the bytes an id needs to fill its last group


@functools.lru_cache(maxsize=64)
def _tails(size: int) -> list[bytes]:
    """The id tails of every message of an entry of ``size`` messages (a one-message
    entry has a plain id)."""
    return [NO_BATCH_TAIL] if size == 1 else [batch_tail(i, size) for i in range(size)]


def _slices(
    data: pa.Buffer, start: Ints, length: Ints, kind: pa.DataType, present: Flags | None = None
) -> pa.Array:
    """The byte ranges of ``data`` as one Arrow array (null where not ``present``):
    the ranges and the gaps between them are consecutive elements of a view of
    ``data`` (ranges are in buffer order), and a take of every other one copies them."""
    n = len(start)
    if n == 0:
        return pa.array([], kind)
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2] = start
    bounds[1::2] = start + length
    view = pa.Array.from_buffers(kind, 2 * n - 1, [None, pa.py_buffer(bounds.astype(np.int32)), data])
    every_other = np.arange(0, 2 * n, 2)
    return view.take(pa.array(every_other, mask=None if present is None else ~present))


def _strings(payloads: Sequence[bytes], data: pa.Buffer, start: Ints, length: Ints) -> pa.Array:
    """UTF-8 text of the byte ranges; text that is not UTF-8 is a corrupt entry."""
    binary = _slices(data, start, length, pa.binary())
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        raise_corrupt(payloads, "text is not UTF-8")
        raise


def _text_or_replaced(keys: pa.Array) -> pa.Array:
    """Keys as text; a key that is not UTF-8 gets U+FFFD for its bad bytes (the
    one column built per message, and only when some key is not UTF-8)."""
    try:
        return keys.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if k is None else k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string()
        )


def _properties(payloads: Sequence[bytes], data: pa.Buffer, cols: EntryColumns, chosen: Ints) -> pa.Array:
    kind = ARROW_SCHEMA.field("properties").type
    count = cols.property_count[chosen]
    offsets = np.concatenate([[0], np.cumsum(count)]).astype(np.int32)
    if not count.any():
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(pa.array(offsets), empty, empty, type=kind)
    first = cols.property_first[chosen]
    slots = np.repeat(first - (offsets[:-1]), count) + np.arange(int(count.sum()))
    names = _strings(payloads, data, cols.property_name_start[slots], cols.property_name_len[slots])
    values = _strings(payloads, data, cols.property_value_start[slots], cols.property_value_len[slots])
    return pa.MapArray.from_arrays(pa.array(offsets), names, values, type=kind)


def _versions(version: Ints, present: Flags) -> pa.Array:
    """Schema versions as Pulsar's 8 big-endian bytes of a long (null where absent)."""
    n = len(version)
    offsets = (np.arange(n + 1) * 8).astype(np.int32)
    validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    raw = pa.py_buffer(version.astype(">i8").tobytes())
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(offsets), raw], null_count=int(n - present.sum())
    )


def batches(
    read: ReadRange, entries: Iterator[tuple[int, bytes]], builder: RowsBuilder
) -> Iterator[pa.RecordBatch]:
    """RecordBatches of the messages in ``entries`` ((entry id, payload) in order)."""
    for entry_id, payload in entries:
        builder.add_entry(entry_id, payload)
        if builder.full:
            yield from _rows_of(builder.take())
    if len(builder):
        yield from _rows_of(builder.take())


def _rows_of(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """``batch`` unless the filters left it empty."""
    if batch.num_rows:
        yield batch
