"""The vectorised entry decoder (storage.formats.entry_columns) equals the
per-message one (``decode_entry``) on randomized entries - properties, keys,
times, schema versions, empty payloads, entries of 1 and of many messages - and
refuses what ``decode_entry`` refuses with the same error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.formats.entry_columns import EntryColumns, decode_entries
from storage.formats.entry_format import EntryMessage, decode_entry, encode_entry
from storage.formats.errors import CorruptEntry

pytestmark = pytest.mark.unit

INT64 = st.integers(-(2**63), 2**63 - 1)

messages = st.builds(
    EntryMessage,
    payload=st.binary(max_size=60),  # empty payloads included
    publish_time_ms=INT64,
    producer_name=st.text(max_size=12),
    sequence_id=INT64,
    key=st.none() | st.binary(max_size=12),
    ordering_key=st.none() | st.binary(max_size=12),
    properties=st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=4),
    event_time_ms=st.none() | INT64,
    deliver_at_ms=st.none() | INT64,
    schema_version=st.none() | st.integers(0, 2**63 - 1),
)
plain = st.builds(
    EntryMessage,
    payload=st.binary(max_size=30),
    publish_time_ms=INT64,
    producer_name=st.sampled_from(["p", "producer-é"]),
    sequence_id=INT64,
)
entries = st.lists(st.lists(messages, min_size=1, max_size=12), min_size=1, max_size=6)


def as_messages(cols: EntryColumns) -> list[list[EntryMessage]]:
    """The columns back as per-message objects (what decode_entry gives)."""
    data = cols.data

    def cut(start: int, length: int) -> bytes:
        return data[start : start + length]

    out: list[list[EntryMessage]] = [[] for _ in cols.count]
    for m in range(len(cols.entry)):
        first, count = int(cols.property_first[m]), int(cols.property_count[m])
        properties = {
            cut(int(cols.property_name_start[p]), int(cols.property_name_len[p])).decode(): cut(
                int(cols.property_value_start[p]), int(cols.property_value_len[p])
            ).decode()
            for p in range(first, first + count)
        }
        assert len(properties) == count
        out[int(cols.entry[m])].append(
            EntryMessage(
                cut(int(cols.payload_start[m]), int(cols.payload_len[m])),
                int(cols.publish_time_ms[m]),
                cut(int(cols.name_start[m]), int(cols.name_len[m])).decode(),
                int(cols.sequence_id[m]),
                cut(int(cols.key_start[m]), int(cols.key_len[m])) if cols.has_key[m] else None,
                cut(int(cols.ordering_key_start[m]), int(cols.ordering_key_len[m]))
                if cols.has_ordering_key[m]
                else None,
                properties,
                int(cols.event_time_ms[m]) if cols.has_event_time[m] else None,
                int(cols.deliver_at_ms[m]) if cols.has_deliver_at[m] else None,
                int(cols.schema_version[m]) if cols.has_schema_version[m] else None,
            )
        )
        assert int(cols.batch_index[m]) == len(out[int(cols.entry[m])]) - 1
    return out


@settings(max_examples=60, deadline=None)
@given(entries)
def test_columns_equal_the_per_message_decoder(batch: list[list[EntryMessage]]) -> None:
    payloads = [encode_entry(messages) for messages in batch]
    cols = decode_entries(payloads)
    assert cols.count.tolist() == [len(m) for m in batch]
    assert as_messages(cols) == [decode_entry(p) for p in payloads] == batch


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=5), plain)
def test_entries_of_one_and_of_many_messages(sizes: list[int], message: EntryMessage) -> None:
    batch = [[message] * size for size in sizes]
    cols = decode_entries([encode_entry(messages) for messages in batch])
    assert as_messages(cols) == batch


@settings(max_examples=60, deadline=None)
@given(entries, st.data())
def test_a_damaged_entry_raises_what_the_per_message_decoder_raises(
    batch: list[list[EntryMessage]], data: st.DataObject
) -> None:
    payloads = [encode_entry(messages) for messages in batch]
    which = data.draw(st.integers(0, len(payloads) - 1))
    damaged = bytearray(payloads[which])
    how = data.draw(st.sampled_from(["cut", "flip", "append"]))
    if how == "cut":
        del damaged[data.draw(st.integers(0, len(damaged) - 1)) :]
    elif how == "flip":
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] ^= data.draw(st.integers(1, 255))
    else:
        damaged += b"\x00"
    payloads[which] = bytes(damaged)
    try:
        expected = [decode_entry(p) for p in payloads]
    except CorruptEntry as exc:
        try:
            cols = decode_entries(payloads)
        except CorruptEntry as raised:
            assert str(raised) == str(exc)
        else:  # text is checked where it becomes strings (rows.py: Arrow's cast)
            assert str(exc) == "text is not UTF-8"
            with pytest.raises(UnicodeDecodeError):
                as_messages(cols)
    else:  # a flip that leaves a valid entry (another length, time or text)
        assert as_messages(decode_entries(payloads)) == expected


def test_a_repeated_property_name_is_corruption() -> None:
    data = bytearray(encode_entry([EntryMessage(b"x", 1, "p", 1, properties={"a1": "v", "a2": "w"})]))
    at = data.index(b"a2")
    data[at : at + 2] = b"a1"
    with pytest.raises(CorruptEntry, match="repeated"):
        decode_entries([encode_entry([EntryMessage(b"", 1, "p", 1)]), bytes(data)])
    long = "n" * 100  # past the padded comparison: the per-name check
    data = bytearray(
        encode_entry([EntryMessage(b"x", 1, "p", 1, properties={long + "1": "", long + "2": ""})])
    )
    at = data.index((long + "2").encode())
    data[at : at + 101] = (long + "1").encode()
    with pytest.raises(CorruptEntry, match="repeated"):
        decode_entries([bytes(data)])
