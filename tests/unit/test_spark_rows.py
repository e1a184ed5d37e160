"""The connector's rows (pyspark_folio.rows) built from the vectorised decoder
equal rows built message by message from ``decode_entry`` - every column, with
the range's bounds and the pushed filters - and a corrupt entry fails the task."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark_folio.names import TopicPartition
from pyspark_folio.plan import ReadRange, RowFilter
from pyspark_folio.rows import ARROW_SCHEMA, RowsBuilder, batches

from storage.formats.entry_format import EntryMessage, decode_entry, encode_entry
from storage.formats.errors import CorruptEntry
from storage.formats.message_id import MessageId

pytestmark = pytest.mark.unit

TIME = st.integers(-(10**12), 10**13)  # ms that a timestamp[us] holds
KEYS = ["a", "b", "é"]

messages = st.builds(
    EntryMessage,
    payload=st.binary(max_size=40),
    publish_time_ms=TIME,
    producer_name=st.sampled_from(["p", "q-ü", ""]),
    sequence_id=st.integers(-(2**63), 2**63 - 1),
    key=st.none() | st.sampled_from([k.encode() for k in KEYS]) | st.binary(max_size=6),
    properties=st.dictionaries(st.text(max_size=6), st.text(max_size=8), max_size=3),
    event_time_ms=st.none() | TIME,
    schema_version=st.none() | st.integers(0, 2**63 - 1),
)


def expected_rows(read: ReadRange, entries: list[tuple[int, bytes]]) -> list[dict[str, object]]:
    """Rows as the per-message decoder gives them."""
    out: list[dict[str, object]] = []
    rows = read.rows
    for entry_id, payload in entries:
        decoded = decode_entry(payload)
        for index, m in enumerate(decoded):
            if entry_id == read.first_entry and index < read.first_batch:
                continue
            if entry_id == read.last_entry and read.stop_batch is not None and index >= read.stop_batch:
                continue
            if rows.publish_min_ms is not None and m.publish_time_ms < rows.publish_min_ms:
                continue
            if rows.publish_max_ms is not None and m.publish_time_ms > rows.publish_max_ms:
                continue
            key = None if m.key is None else m.key.decode("utf-8", "replace")
            if rows.keys is not None and key not in rows.keys:
                continue
            size = len(decoded)
            out.append(
                {
                    "topic": read.log.topic,
                    "partition": read.log.partition,
                    "message_id": MessageId(
                        read.ledger_id, entry_id, read.log.partition, index if size > 1 else -1, size
                    ).to_base64(),
                    "ledger_id": read.ledger_id,
                    "entry_id": entry_id,
                    "batch_index": index,
                    "key": key,
                    "value": m.payload,
                    "properties": list(m.properties.items()),
                    "publish_time": datetime.fromtimestamp(m.publish_time_ms / 1000, UTC),
                    "event_time": None
                    if m.event_time_ms is None
                    else datetime.fromtimestamp(m.event_time_ms / 1000, UTC),
                    "producer": m.producer_name,
                    "sequence_id": m.sequence_id,
                    "schema_version": None
                    if m.schema_version is None
                    else m.schema_version.to_bytes(8, "big", signed=True),
                }
            )
    return out


def as_us(row: dict[str, object]) -> dict[str, object]:
    """Timestamps compared as microseconds (datetime from float ms can round)."""
    return {
        k: int(v.timestamp() * 1000) if isinstance(v, datetime) else v  # ms resolution in the log
        for k, v in row.items()
    }


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(messages, min_size=1, max_size=8), min_size=1, max_size=6),
    st.integers(-1, 3),
    st.data(),
)
def test_rows_equal_the_per_message_decoder(
    batch: list[list[EntryMessage]], partition: int, data: st.DataObject
) -> None:
    log = TopicPartition("persistent://t/n/x", "persistent://t/n/x", partition)
    entries = [(10 + i, encode_entry(m)) for i, m in enumerate(batch)]
    first_batch = data.draw(st.integers(0, len(batch[0]) - 1))
    stop_batch = data.draw(st.none() | st.integers(1, len(batch[-1])))
    if len(batch) == 1 and stop_batch is not None:
        stop_batch = max(stop_batch, first_batch + 1)
    rows = RowFilter(
        data.draw(st.none() | TIME),
        data.draw(st.none() | TIME),
        data.draw(st.none() | st.frozensets(st.sampled_from(KEYS))),
    )
    read = ReadRange(log, 7, 10, 9 + len(batch), first_batch, stop_batch, rows)
    rows_max = data.draw(st.sampled_from([1, 5, 1000]))
    got = list(batches(read, iter(entries), RowsBuilder(read, rows_max=rows_max)))
    assert all(b.schema == ARROW_SCHEMA and b.num_rows for b in got)
    assert [as_us(r) for b in got for r in b.to_pylist()] == [as_us(r) for r in expected_rows(read, entries)]


def test_entries_of_one_and_of_many_messages_and_empty_payloads() -> None:
    log = TopicPartition("persistent://t/n/x-partition-2", "persistent://t/n/x", 2)
    sizes = [1, 1000, 1, 129, 2]
    entries = [
        (e, encode_entry([EntryMessage(b"" if i % 3 else b"v%d" % i, 5, "p", i) for i in range(n)]))
        for e, n in enumerate(sizes)
    ]
    read = ReadRange(log, 2**40, 0, len(sizes) - 1)
    got = [r for b in batches(read, iter(entries), RowsBuilder(read)) for r in b.to_pylist()]
    assert [as_us(r) for r in got] == [as_us(r) for r in expected_rows(read, entries)]
    assert len(got) == sum(sizes)


def test_a_producer_name_that_is_not_utf8_fails_the_read() -> None:
    log = TopicPartition("persistent://t/n/x", "persistent://t/n/x", -1)
    data = bytearray(encode_entry([EntryMessage(b"x", 1, "pz", 1)]))
    data[data.index(b"pz") + 1] = 0xFF
    read = ReadRange(log, 1, 0, 0)
    with pytest.raises(CorruptEntry, match="UTF-8"):
        list(batches(read, iter([(0, bytes(data))]), RowsBuilder(read)))


def test_a_key_that_is_not_utf8_reads_with_replacement_characters() -> None:
    log = TopicPartition("persistent://t/n/x", "persistent://t/n/x", -1)
    entry = encode_entry([EntryMessage(b"x", 1, "p", 1, key=b"\xffk"), EntryMessage(b"y", 1, "p", 2)])
    read = ReadRange(log, 1, 0, 0)
    (batch,) = batches(read, iter([(0, entry)]), RowsBuilder(read))
    assert batch.column("key") == pa.array(["\ufffdk", None], pa.string())


@pytest.mark.parametrize("ledger_id", [0, 1, 127, 128, 2**21, 2**40, 2**63 - 1])
@pytest.mark.parametrize("partition", [-1, 0, 5, 300])
def test_message_ids_of_every_length_equal_the_ids_consumers_get(ledger_id: int, partition: int) -> None:
    """Ids of every length mod 3 (varints of 1 to 9 bytes, entries of 1 to 1000
    messages) in one batch, as ``MessageId.to_base64`` writes them."""
    log = TopicPartition("persistent://t/n/x", "persistent://t/n/x", partition)
    sizes = {0: 1, 1: 2, 127: 3, 128: 128, 2**14: 1000, 2**35: 1, 2**62: 129}
    entries = [(e, encode_entry([EntryMessage(b"v", 5, "p", i) for i in range(n)])) for e, n in sizes.items()]
    read = ReadRange(log, ledger_id, 0, 2**62)
    got = [r["message_id"] for b in batches(read, iter(entries), RowsBuilder(read)) for r in b.to_pylist()]
    want = [
        MessageId(ledger_id, e, partition, i if n > 1 else -1, n).to_base64()
        for e, n in sizes.items()
        for i in range(n)
    ]
    assert got == want
