"""Entry batch format (docs/decisions/0004): round trips, bounds, and typed errors
for truncated or corrupt entries."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.formats.entry_format import (
    ENTRY_BYTES_MAX,
    ENTRY_HEADER_BYTES,
    FORMAT_VERSION,
    MESSAGES_PER_ENTRY_MAX,
    EntryBatch,
    EntryMessage,
    _encode_message_checked,
    decode_entry,
    encode_entry,
    encode_message,
    entry_message_count,
)
from storage.formats.errors import CorruptEntry, FormatError, InvalidMessage, MessageTooLarge
from storage.wire import MAX_ENTRY_PAYLOAD_BYTES

pytestmark = pytest.mark.unit

INT64 = st.integers(-(2**63), 2**63 - 1)

messages = st.builds(
    EntryMessage,
    payload=st.binary(max_size=200),
    publish_time_ms=INT64,
    producer_name=st.text(max_size=20),
    sequence_id=INT64,
    key=st.none() | st.binary(max_size=20),
    ordering_key=st.none() | st.binary(max_size=20),
    properties=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=5),
    event_time_ms=st.none() | INT64,
    deliver_at_ms=st.none() | INT64,
    schema_version=st.none() | st.integers(0, 2**63 - 1),
)


def msg(payload: bytes = b"hello", **fields: object) -> EntryMessage:
    base: dict[str, object] = {"publish_time_ms": 1_700_000_000_000, "producer_name": "p-1", "sequence_id": 7}
    base.update(fields)
    return EntryMessage(payload, **base)  # type: ignore[arg-type]


@given(st.lists(messages, min_size=1, max_size=20))
def test_round_trip(batch: list[EntryMessage]) -> None:
    data = encode_entry(batch)
    assert decode_entry(data) == batch
    assert entry_message_count(data) == len(batch)


def test_full_message_round_trips_and_layout_is_stable() -> None:
    full = msg(
        b"\x00payload",
        key=b"k",
        ordering_key=b"ok",
        properties={"a": "1", "\u00e9": "\u20ac"},
        event_time_ms=5,
        deliver_at_ms=-1,
    )
    data = encode_entry([full, msg()])
    assert data[:ENTRY_HEADER_BYTES] == bytes([FORMAT_VERSION, 0, 2])
    assert decode_entry(data) == [full, msg()]
    plain = encode_entry([msg(b"")])
    # header 3 + message head 25 + "p-1"; no optional parts, no properties, empty payload
    assert len(plain) == 3 + 25 + 3


def test_schema_version_is_stored_and_entries_without_it_read_as_before() -> None:
    """A message's schema version is in the log itself (flag 0x10, an i64 after the
    ordering key), so a reader of the log needs no registry to know it; entries
    written before the flag existed decode unchanged, with no version."""
    written_before = (  # one message with key "k" (flags 0x04), laid out as before the flag existed
        bytes([1, 0, 1, 0x04, 0, 0])
        + struct.pack(">qqHI", 1_700_000_000_000, 7, 3, 5)
        + struct.pack(">I", 1)
        + b"k"
        + b"p-1"
        + b"hello"
    )
    assert decode_entry(written_before) == [msg(key=b"k")]
    versioned = msg(key=b"k", schema_version=3)
    data = encode_entry([versioned])
    assert data[3] == 0x04 | 0x10
    assert data[-len(b"p-1hello") - 8 : -len(b"p-1hello")] == struct.pack(">q", 3)
    assert decode_entry(data) == [versioned]
    assert decode_entry(encode_entry([msg(schema_version=0)]))[0].schema_version == 0


def test_empty_payload_and_empty_strings() -> None:
    m = msg(b"", producer_name="", key=b"", ordering_key=b"", properties={"": ""})
    assert decode_entry(encode_entry([m])) == [m]


def test_batch_cuts_at_message_count_bound() -> None:
    batch = EntryBatch()
    for i in range(MESSAGES_PER_ENTRY_MAX):
        assert batch.add(msg(sequence_id=i))
    assert not batch.add(msg())
    assert len(batch) == MESSAGES_PER_ENTRY_MAX
    decoded = decode_entry(batch.encode())
    assert [m.sequence_id for m in decoded] == list(range(MESSAGES_PER_ENTRY_MAX))


def test_batch_cuts_at_byte_bound_and_tracks_size() -> None:
    batch = EntryBatch(bytes_max=200)
    one = len(encode_message(msg(b"x" * 50)))
    assert batch.add(msg(b"x" * 50))
    assert batch.size_bytes == ENTRY_HEADER_BYTES + one
    assert batch.add(msg(b"x" * 50))
    assert not batch.add(msg(b"x" * 50))  # 3 + 3 * 83 > 200
    assert len(batch.encode()) == batch.size_bytes
    with pytest.raises(MessageTooLarge):
        batch.add(msg(b"x" * 200))  # cannot fit even alone


def test_message_too_large_for_any_entry() -> None:
    assert ENTRY_BYTES_MAX <= MAX_ENTRY_PAYLOAD_BYTES
    with pytest.raises(MessageTooLarge) as info:
        encode_message(msg(b"x" * ENTRY_BYTES_MAX))
    assert isinstance(info.value, InvalidMessage)
    assert isinstance(info.value, FormatError)
    exact = ENTRY_BYTES_MAX - ENTRY_HEADER_BYTES - 25 - 3
    assert len(encode_entry([msg(b"x" * exact)])) == ENTRY_BYTES_MAX
    with pytest.raises(MessageTooLarge):
        encode_entry([msg(b"x" * (exact + 1))])


def test_encode_entry_refuses_too_many_messages() -> None:
    with pytest.raises(InvalidMessage):
        encode_entry([msg()] * (MESSAGES_PER_ENTRY_MAX + 1))


@pytest.mark.parametrize(
    "bad",
    [
        msg(sequence_id=2**63),
        msg(publish_time_ms=-(2**63) - 1),
        msg(event_time_ms=2**64),
        msg(deliver_at_ms=1.5),
        msg(producer_name="\ud800"),
        msg(properties={"k": "\udfff"}),
        msg(producer_name="n" * 70_000),
        msg(properties={"n" * 70_000: "v"}),
    ],
)
def test_invalid_fields_raise_typed_error(bad: EntryMessage) -> None:
    with pytest.raises(InvalidMessage):
        encode_message(bad)


GOOD = encode_entry([msg(key=b"k", properties={"a": "b"}, event_time_ms=1), msg(b"second")])


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",
        bytes([2, 0, 1]) + GOOD[3:],  # unknown version
        bytes([1, 0, 0]),  # zero messages
        struct.pack(">BH", 1, MESSAGES_PER_ENTRY_MAX + 1) + GOOD[3:],  # too many messages
        bytes([1, 0, 3]) + GOOD[3:],  # count says more than present
        bytes([1, 0, 1]) + GOOD[3:],  # count says fewer: trailing bytes
        GOOD + b"\x00",  # trailing byte
        GOOD[:3] + bytes([0x80]) + GOOD[4:],  # unknown flag
        GOOD[:3] + bytes([0x04]) + GOOD[4:],  # flags disagree with the body
        b"\x01" + b"\x00" * (ENTRY_BYTES_MAX + 1),  # over the size bound
    ],
)
def test_corrupt_entries_raise_typed_error(data: bytes) -> None:
    with pytest.raises(CorruptEntry) as info:
        decode_entry(data)
    assert info.value.code == "corrupt_entry"


def test_every_truncation_raises_typed_error() -> None:
    for cut in range(len(GOOD)):
        with pytest.raises(CorruptEntry):
            decode_entry(GOOD[:cut])


def test_invalid_utf8_raises_typed_error() -> None:
    data = encode_entry([msg(producer_name="abc")])
    at = data.index(b"abc")
    with pytest.raises(CorruptEntry):
        decode_entry(data[:at] + b"\xff\xfe\xfd" + data[at + 3 :])


def test_repeated_property_name_is_corrupt() -> None:
    data = encode_entry([msg(b"", properties={"a": "1", "b": "2"})])
    at = data.index(b"b2")
    with pytest.raises(CorruptEntry):
        decode_entry(data[:at] + b"a2" + data[at + 2 :])


def test_entry_message_count_checks_header_only() -> None:
    assert entry_message_count(GOOD) == 2
    with pytest.raises(CorruptEntry):
        entry_message_count(b"\x01\x00")


@settings(max_examples=300)
@given(st.binary(max_size=120))
def test_arbitrary_bytes_decode_or_raise_typed_error(data: bytes) -> None:
    try:
        decoded = decode_entry(data)
    except CorruptEntry:
        return
    assert encode_entry(decoded) == data


@given(st.lists(messages, min_size=1, max_size=5), st.data())
def test_single_byte_corruption_never_escapes_as_other_error(
    batch: list[EntryMessage], data: st.DataObject
) -> None:
    encoded = bytearray(encode_entry(batch))
    at = data.draw(st.integers(0, len(encoded) - 1))
    encoded[at] = data.draw(st.integers(0, 255))
    try:
        decode_entry(bytes(encoded))
    except CorruptEntry:
        pass


def test_producer_names_alternating_in_one_entry_and_shared_empty_properties() -> None:
    names_and_properties = [("a", {}), ("a", {"k": "v"}), ("b", {}), ("a", {})]
    batch = [msg(producer_name=n, properties=p) for n, p in names_and_properties]
    decoded = decode_entry(encode_entry(batch))
    assert [m.producer_name for m in decoded] == ["a", "a", "b", "a"]
    assert [dict(m.properties) for m in decoded] == [{}, {"k": "v"}, {}, {}]
    with pytest.raises(TypeError):  # the empty mapping is shared, so it must be read-only
        decoded[0].properties["x"] = "y"  # type: ignore[index]


@given(messages)
def test_usual_message_fast_path_gives_the_checked_encoding(message: EntryMessage) -> None:
    """``encode_message`` takes a short cut for a message without optional fields;
    its bytes are those of the full, checked encoder."""
    plain = EntryMessage(message.payload, message.publish_time_ms, message.producer_name, message.sequence_id)
    for m in (message, plain):
        assert encode_message(m) == _encode_message_checked(m)
