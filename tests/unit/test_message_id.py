"""MessageIdData encoding: every worked example of docs/compatibility.md §1.8 byte for byte,
round trips, tolerant decoding and typed errors for garbage."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.formats.errors import FormatError, MessageIdError
from storage.formats.message_id import (
    BASE64_CHARS_MAX,
    EARLIEST_ID,
    ENCODED_BYTES_MAX,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    LATEST_ID,
    STRING_CHARS_MAX,
    MessageId,
    duplicate_id,
    parse_start,
)
from storage.formats.positions import EARLIEST, LATEST, NO_BATCH, MessagePosition, Position

if TYPE_CHECKING:
    from gateway.broker.dispatch.base import Deliver
    from storage.formats.entry_format import EntryMessage

pytestmark = pytest.mark.unit

FF9_01 = "ff " * 9 + "01"

# (id, hex bytes, base64) - the table of §1.8, current-client rules.
WORKED = [
    (MessageId(3, 0), "08 03 10 00 30 00", "CAMQADAA"),
    (MessageId(3, 0, partition=2), "08 03 10 00 18 02 30 00", "CAMQABgCMAA="),
    (MessageId(3, 0, batch_index=1, batch_size=5), "08 03 10 00 20 01 30 05", "CAMQACABMAU="),
    (MessageId(1234567, 89), "08 87 ad 4b 10 59 30 00", "CIetSxBZMAA="),
    (EARLIEST_ID, f"08 {FF9_01} 10 {FF9_01} 30 00", "CP///////////wEQ////////////ATAA"),
    (
        LATEST_ID,
        "08 ff ff ff ff ff ff ff ff 7f 10 ff ff ff ff ff ff ff ff 7f 30 00",
        "CP//////////fxD//////////38wAA==",
    ),
]


@pytest.mark.parametrize(("mid", "hex_bytes", "b64"), WORKED)
def test_worked_examples_encode_byte_for_byte(mid: MessageId, hex_bytes: str, b64: str) -> None:
    assert mid.to_bytes() == bytes.fromhex(hex_bytes)
    assert mid.to_base64() == b64


@pytest.mark.parametrize(("mid", "hex_bytes", "b64"), WORKED)
def test_worked_examples_decode(mid: MessageId, hex_bytes: str, b64: str) -> None:
    decoded = MessageId.from_base64(b64)
    assert decoded == mid
    assert decoded.batch_size == mid.batch_size
    assert MessageId.from_bytes(bytes.fromhex(hex_bytes)) == mid


def test_old_client_form_without_batch_size_decodes_and_reencodes_current() -> None:
    mid = MessageId.from_base64("CAAQAw==")
    assert (mid.ledger_id, mid.entry_id, mid.partition, mid.batch_index, mid.batch_size) == (0, 3, -1, -1, 0)
    assert not mid.is_batch
    assert mid.to_bytes() == bytes.fromhex("08 00 10 03 30 00")


def test_sentinels_match_positions_and_duplicate_is_minus_one() -> None:
    assert EARLIEST_ID.entry == EARLIEST
    assert LATEST_ID.entry == LATEST
    assert duplicate_id() == MessageId(-1, -1)
    assert duplicate_id().to_base64() == EARLIEST_ID.to_base64()
    assert duplicate_id(3).to_bytes() == bytes.fromhex(f"08 {FF9_01} 10 {FF9_01} 18 03 30 00")


def test_batch_size_is_not_identity_and_plain_ids_write_zero() -> None:
    assert MessageId(1, 2, batch_index=0, batch_size=3) == MessageId(1, 2, batch_index=0, batch_size=9)
    assert MessageId(1, 2, batch_size=7).to_bytes() == MessageId(1, 2).to_bytes()


def test_positions_and_of() -> None:
    mid = MessageId(5, 6, partition=1, batch_index=2, batch_size=4)
    assert mid.position == MessagePosition(5, 6, 2)
    assert mid.entry == Position(5, 6)
    assert MessageId.of(MessagePosition(5, 6, 2), partition=1, batch_size=4) == mid
    assert not MessageId.of(MessagePosition(5, 6)).is_batch


def test_string_forms() -> None:
    assert str(MessageId(12, 3)) == "12:3:-1"
    assert str(MessageId(12, 3, 2, 7)) == "12:3:2:7"
    assert MessageId.parse("12:3:-1") == MessageId(12, 3)
    assert MessageId.parse("12:3:2:7") == MessageId(12, 3, 2, 7)
    assert MessageId.parse("49:-1") == MessageId(49, -1)
    assert MessageId.parse("-1:-1:-1") == EARLIEST_ID


def test_parse_start() -> None:
    assert parse_start("earliest") is EARLIEST_ID
    assert parse_start("latest") is LATEST_ID
    assert parse_start("CAMQADAA") == MessageId(3, 0)
    assert parse_start("CAMQABgCMAA") == MessageId(3, 0, 2)  # padding optional


def test_unknown_and_skipped_fields_are_tolerated() -> None:
    body = MessageId(7, 8, batch_index=1, batch_size=2).to_bytes()
    ack_set_packed = bytes([5 << 3 | 2, 2, 0x01, 0x02])
    ack_set_plain = bytes([5 << 3 | 0, 0x05])
    first_chunk = bytes([7 << 3 | 2, 4]) + MessageId(1, 1).to_bytes()[:4]
    topic = bytes([9 << 3 | 2, 3]) + b"t/x"
    fixed64 = bytes([10 << 3 | 1]) + bytes(8)
    fixed32 = bytes([11 << 3 | 5]) + bytes(4)
    decoded = MessageId.from_bytes(
        body + ack_set_packed + ack_set_plain + first_chunk + topic + fixed64 + fixed32
    )
    assert decoded == MessageId(7, 8, batch_index=1)
    assert decoded.batch_size == 2


def test_fields_in_any_order_and_last_one_wins() -> None:
    data = bytes.fromhex("10 05 08 01 08 02")
    assert MessageId.from_bytes(data) == MessageId(2, 5)


GARBAGE = [
    b"",  # required fields missing
    bytes.fromhex("08 03"),  # entryId missing
    bytes.fromhex("10 03"),  # ledgerId missing
    bytes.fromhex("08"),  # truncated key's value
    bytes.fromhex("08 83"),  # truncated varint
    bytes.fromhex("08 " + "ff " * 10 + "01 10 00"),  # 11-byte varint
    bytes.fromhex("08 " + "ff " * 9 + "02 10 00"),  # 10-byte varint above 64 bits
    bytes.fromhex("09 00 00 00 00 00 00 00 00 10 00"),  # ledgerId with fixed64 wire type
    bytes.fromhex("08 01 10 01 4a 05 61"),  # length-delimited field past the end
    bytes.fromhex("08 01 10 01 51 00"),  # fixed64 field past the end
    bytes.fromhex("08 01 10 01 5b"),  # group wire type 3
    bytes.fromhex("08 01 10 01 5e 00"),  # wire type 6
    bytes.fromhex("00 01 08 01 10 01"),  # field number 0
    bytes.fromhex("08 01 10 01 18 80 80 80 80 10"),  # partition above int32
    bytes.fromhex("08 01 10 01 18 " + "fe " + "ff " * 8 + "01"),  # partition -2
    bytes.fromhex("08 01 10 01 20 " + "fe " + "ff " * 8 + "01"),  # batch index -2
    bytes.fromhex("08 01 10 01 20 00 30 " + "ff " * 9 + "01"),  # batch size -1
    bytes(ENCODED_BYTES_MAX + 1),  # too long
]


@pytest.mark.parametrize("data", GARBAGE)
def test_garbage_bytes_raise_typed_error(data: bytes) -> None:
    with pytest.raises(MessageIdError) as info:
        MessageId.from_bytes(data)
    assert isinstance(info.value, FormatError)
    assert info.value.code == "invalid_message_id"
    assert info.value.retriable is False


@pytest.mark.parametrize(
    "text",
    ["", "!!!!", "CAMQ ADAA", "CAMQ-ADAA", "CAMQADAA====", "CAMQADAA=", "A" * (BASE64_CHARS_MAX + 4), "CA"],
)
def test_garbage_base64_raises_typed_error(text: str) -> None:
    with pytest.raises(MessageIdError):
        MessageId.from_base64(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1",
        "1:2:3:4:5",
        "a:b",
        "1:2:x",
        "1::2",
        "+1:2",
        "1:2:-2",
        "1:2:-1:-5",
        "٣:1",
        "1" * STRING_CHARS_MAX,
    ],
)
def test_garbage_strings_raise_typed_error(text: str) -> None:
    with pytest.raises(MessageIdError):
        MessageId.parse(text)


@pytest.mark.parametrize(
    "fields",
    [
        (INT64_MAX + 1, 0),
        (0, INT64_MIN - 1),
        (0, 0, INT32_MAX + 1),
        (0, 0, -2),
        (0, 0, -1, -2),
        (0, 0, -1, 0, -1),
        (True, 0),
    ],
)
def test_out_of_range_fields_raise_typed_error(fields: tuple[int, ...]) -> None:
    with pytest.raises(MessageIdError):
        MessageId(*fields)


ids = st.builds(
    MessageId,
    ledger_id=st.integers(INT64_MIN, INT64_MAX),
    entry_id=st.integers(INT64_MIN, INT64_MAX),
    partition=st.integers(-1, INT32_MAX),
    batch_index=st.integers(NO_BATCH, INT32_MAX),
    batch_size=st.integers(0, INT32_MAX),
)


@given(ids)
def test_round_trips(mid: MessageId) -> None:
    decoded = MessageId.from_base64(mid.to_base64())
    assert decoded == mid
    assert decoded.batch_size == (mid.batch_size if mid.is_batch else 0)
    assert MessageId.parse(str(mid)) == mid
    assert decoded.to_bytes() == mid.to_bytes()


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_typed_error(data: bytes) -> None:
    try:
        mid = MessageId.from_bytes(data)
    except MessageIdError:
        return
    assert MessageId.from_bytes(mid.to_bytes()) == mid


@given(st.text(max_size=40))
def test_arbitrary_text_parses_or_raises_typed_error(text: str) -> None:
    for parse in (MessageId.parse, MessageId.from_base64, parse_start):
        try:
            parse(text)
        except MessageIdError:
            pass


def test_base64_is_standard_alphabet() -> None:
    mid = MessageId(2**62 + 12345, 251, 3, 62, 63)
    assert base64.b64decode(mid.to_base64(), validate=True) == mid.to_bytes()


@pytest.mark.parametrize(
    ("ledger", "entry", "partition", "count"),
    [(3, 0, -1, 1), (3, 0, 2, 1), (3, 0, -1, 5), (1234567, 89, 7, 300), (2**40, 2**33, -1, 1000)],
)
def test_entry_ids_base64_matches_message_id(ledger: int, entry: int, partition: int, count: int) -> None:
    from storage.formats.message_id import entry_ids_base64

    got = entry_ids_base64(ledger, entry, partition, count)
    if count == 1:
        assert got == [MessageId(ledger, entry, partition).to_base64()]
    else:
        assert got == [MessageId(ledger, entry, partition, i, count).to_base64() for i in range(count)]


@pytest.mark.parametrize(
    ("ledger", "entry", "partition", "index", "size"),
    [
        (3, 0, -1, -1, 0),
        (3, 0, 2, -1, 0),
        (3, 0, -1, 1, 5),
        (1234567, 89, 7, 299, 300),
        (2**40, 2**33, -1, 0, 2),
    ],
)
def test_delivery_frame_ids_match_message_id(
    ledger: int, entry: int, partition: int, index: int, size: int
) -> None:
    from gateway.api.wire_mapping import delivery_frames, encoded_delivery_frames
    from gateway.protocol.ws_frames import encode_frame
    from storage.formats.entry_format import EntryMessage
    from storage.formats.positions import MessagePosition

    message = EntryMessage(b"x", 1_700_000_000_000, "p", 0)
    # two entries in one run: the second must not reuse the first one's id prefix
    runs = [delivery(MessagePosition(ledger, e, index), message, 0, size) for e in (entry, entry + 1)]
    frames = delivery_frames(runs, partition)
    assert [f["messageId"] for f in frames] == [
        MessageId(ledger, e, partition, index, size).to_base64() for e in (entry, entry + 1)
    ]
    ids, encoded = encoded_delivery_frames(runs, partition)
    assert ids == [f["messageId"] for f in frames]
    assert encoded == [encode_frame(f) for f in frames]


def test_encoded_delivery_frames_are_the_frames_encoded_for_every_kind_of_message() -> None:
    from gateway.api.wire_mapping import delivery_frames, encoded_delivery_frames
    from gateway.protocol.ws_frames import encode_frame
    from storage.formats.entry_format import EntryMessage
    from storage.formats.positions import MessagePosition

    plain = EntryMessage(b"plain", 1_700_000_000_000, "p", 0)
    later = EntryMessage(b"", 1_700_000_000_120, "p", 1)  # another publish time: another tail
    keyed = EntryMessage(b"k", 1_700_000_000_000, "p", 2, key=b"\xffkey")
    props = EntryMessage(b"p", 1_700_000_000_000, "p", 3, properties={"a": "\u00e9"})
    timed = EntryMessage(b"t", 1_700_000_000_000, "p", 4, event_time_ms=1_600_000_000_001)
    batch = [(plain, 0), (plain, 2), (later, 2), (keyed, 0), (props, 1), (timed, 0)]
    runs = [delivery(MessagePosition(5, 1, i), m, count, 6) for i, (m, count) in enumerate(batch)]
    runs += [
        delivery(MessagePosition(5, 2, -1), plain, 0, 0),
        delivery(MessagePosition(5, 3, -1), later, 0, 0),
    ]
    frames = delivery_frames(runs, 3)
    ids, encoded = encoded_delivery_frames(runs, 3)
    assert ids == [f["messageId"] for f in frames]
    assert encoded == [encode_frame(f) for f in frames]


def delivery(position: MessagePosition, content: EntryMessage, redeliveries: int, batch_size: int) -> Deliver:
    """A ``Deliver`` as a subscription hands it to a sink (its ``content`` set)."""
    from gateway.broker.dispatch.base import ConsumerId, Deliver, Message

    effect = Deliver(ConsumerId(1), Message(position, batch_size=batch_size), redeliveries)
    effect.content = content
    return effect


@given(
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(-1, 2**31 - 1),
    st.integers(2, 40),
)
def test_entry_ids_base64_matches_message_id_for_every_prefix_length(
    ledger: int, entry: int, partition: int, count: int
) -> None:
    """The prefix's whole 3-byte groups are encoded apart from the cached rests: every
    prefix length (so every carry of 0, 1 or 2 bytes) gives the same ids."""
    from storage.formats.message_id import entry_ids_base64

    expected = [MessageId(ledger, entry, partition, i, count).to_base64() for i in range(count)]
    assert entry_ids_base64(ledger, entry, partition, count) == expected
