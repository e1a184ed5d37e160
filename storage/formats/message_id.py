"""Message ids exactly as Pulsar clients see them (pure).

Owns: ``MessageId`` and its three encodings - the protobuf-2 ``MessageIdData``
bytes (hand-written, no protobuf runtime), their standard base64 form used by
the WebSocket API, and the ``L:E:P`` / ``L:E:P:B`` string forms used by REST
and admin - plus the sentinels ``EARLIEST_ID``, ``LATEST_ID`` and the id
answered for a deduplicated publish (``duplicate_id``).

Rule: docs/compatibility.md §1.8, byte for byte, as the Java client's
``MessageIdImpl``/``BatchMessageIdImpl.toByteArray`` writes it: fields in
ascending number order; ledgerId (1) and entryId (2) always; partition (3) only
when >= 0; batch_index (4) only for batch ids; batch_size (6) always (0 for a
plain id). Negative values go on the wire as 10-byte two's-complement varints.
The decoder is tolerant in the protobuf way (field 6 may be missing; fields 5,
7 and unknown fields are skipped by wire type) but strict about garbage:
truncation, over-long varints, group wire types, wrong wire types for known
fields and out-of-range values raise ``MessageIdError``.
"""

from __future__ import annotations

import base64
import binascii
import functools
from dataclasses import dataclass, field

from pybase64 import b64encode_as_string

from storage.formats.errors import MessageIdError
from storage.formats.positions import NO_BATCH, MessagePosition, Position

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
NO_PARTITION = -1
ENCODED_BYTES_MAX = 1024  # a real id is < 64 bytes; newer clients may append a topic name
BASE64_CHARS_MAX = (ENCODED_BYTES_MAX + 2) // 3 * 4
STRING_CHARS_MAX = 100  # "L:E:P:B" with four 20-digit signed numbers fits easily

_U64_MASK = 2**64 - 1
_WIRE_VARINT, _WIRE_FIXED64, _WIRE_LENGTH, _WIRE_FIXED32 = 0, 1, 2, 5
_FIELD_LEDGER, _FIELD_ENTRY, _FIELD_PARTITION, _FIELD_BATCH_INDEX, _FIELD_BATCH_SIZE = 1, 2, 3, 4, 6


@dataclass(frozen=True, slots=True)
class MessageId:
    """A message id: an entry (ledger, entry), the topic partition it came from
    (-1 for a non-partitioned topic) and, for a message inside a batch entry,
    its batch index. ``batch_size`` travels on the wire but, as in Java, is not
    part of the id's identity (``==``/``hash`` ignore it)."""

    ledger_id: int
    entry_id: int
    partition: int = NO_PARTITION
    batch_index: int = NO_BATCH
    batch_size: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        for name, value, low, high in (
            ("ledger_id", self.ledger_id, INT64_MIN, INT64_MAX),
            ("entry_id", self.entry_id, INT64_MIN, INT64_MAX),
            ("partition", self.partition, NO_PARTITION, INT32_MAX),
            ("batch_index", self.batch_index, NO_BATCH, INT32_MAX),
            ("batch_size", self.batch_size, 0, INT32_MAX),
        ):
            if type(value) is not int or not low <= value <= high:
                raise MessageIdError(f"{name} {value!r} is outside [{low}, {high}]")

    @classmethod
    def of(cls, position: MessagePosition, partition: int = NO_PARTITION, batch_size: int = 0) -> MessageId:
        """The id of the message at ``position`` (batch id iff it has a batch index)."""
        return cls(position.ledger_id, position.entry_id, partition, position.batch_index, batch_size)

    @property
    def is_batch(self) -> bool:
        return self.batch_index != NO_BATCH

    @property
    def position(self) -> MessagePosition:
        return MessagePosition(self.ledger_id, self.entry_id, self.batch_index)

    @property
    def entry(self) -> Position:
        return Position(self.ledger_id, self.entry_id)

    # -- protobuf bytes --------------------------------------------------------

    def to_bytes(self) -> bytes:
        out = bytearray()
        _put_field(out, _FIELD_LEDGER, self.ledger_id)
        _put_field(out, _FIELD_ENTRY, self.entry_id)
        if self.partition >= 0:
            _put_field(out, _FIELD_PARTITION, self.partition)
        if self.is_batch:
            _put_field(out, _FIELD_BATCH_INDEX, self.batch_index)
        _put_field(out, _FIELD_BATCH_SIZE, self.batch_size if self.is_batch else 0)
        return bytes(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> MessageId:
        if len(data) > ENCODED_BYTES_MAX:
            raise MessageIdError(f"message id of {len(data)} bytes exceeds {ENCODED_BYTES_MAX}")
        values: dict[int, int] = {}
        pos = 0
        while pos < len(data):
            key, pos = _read_varint(data, pos)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise MessageIdError("field number 0")
            if number in (
                _FIELD_LEDGER,
                _FIELD_ENTRY,
                _FIELD_PARTITION,
                _FIELD_BATCH_INDEX,
                _FIELD_BATCH_SIZE,
            ):
                if wire != _WIRE_VARINT:
                    raise MessageIdError(f"field {number} has wire type {wire}, expected varint")
                raw, pos = _read_varint(data, pos)
                values[number] = raw - 2**64 if raw > INT64_MAX else raw  # last one wins, as protobuf
            else:
                pos = _skip_field(data, pos, wire)
        if _FIELD_LEDGER not in values or _FIELD_ENTRY not in values:
            raise MessageIdError("required field ledgerId or entryId missing")
        for number in (_FIELD_PARTITION, _FIELD_BATCH_INDEX, _FIELD_BATCH_SIZE):
            if number in values and not -(2**31) <= values[number] <= INT32_MAX:
                raise MessageIdError(f"field {number} value {values[number]} is not an int32")
        batch_index = values.get(_FIELD_BATCH_INDEX, NO_BATCH)
        return cls(
            values[_FIELD_LEDGER],
            values[_FIELD_ENTRY],
            values.get(_FIELD_PARTITION, NO_PARTITION),
            batch_index,
            values.get(_FIELD_BATCH_SIZE, 0) if batch_index != NO_BATCH else 0,
        )

    # -- base64 (WebSocket) ----------------------------------------------------

    def to_base64(self) -> str:
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def from_base64(cls, text: str) -> MessageId:
        """Standard alphabet; padding optional (Java's basic decoder accepts both)."""
        if not text or len(text) > BASE64_CHARS_MAX:
            raise MessageIdError(f"base64 message id of {len(text)} chars is empty or too long")
        unpadded = text.rstrip("=")
        if len(text) - len(unpadded) > 2 or (unpadded != text and len(text) % 4):
            raise MessageIdError(f"message id {text[:40]!r} has bad base64 padding")
        try:
            raw = base64.b64decode(unpadded + "=" * (-len(unpadded) % 4), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MessageIdError(f"message id {text[:40]!r} is not base64") from exc
        return cls.from_bytes(raw)

    # -- string forms (REST / admin) -------------------------------------------

    def __str__(self) -> str:
        base = f"{self.ledger_id}:{self.entry_id}:{self.partition}"
        return f"{base}:{self.batch_index}" if self.is_batch else base

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """``L:E``, ``L:E:P`` or ``L:E:P:B`` (decimal, possibly negative)."""
        if len(text) > STRING_CHARS_MAX:
            raise MessageIdError(f"message id string of {len(text)} chars exceeds {STRING_CHARS_MAX}")
        parts = text.split(":")
        if not 2 <= len(parts) <= 4 or not all(_is_decimal(part) for part in parts):
            raise MessageIdError(f"message id {text!r} is not L:E[:P[:B]]")
        numbers = [int(part) for part in parts]
        return cls(*numbers)


EARLIEST_ID = MessageId(-1, -1)
LATEST_ID = MessageId(INT64_MAX, INT64_MAX)


def duplicate_id(partition: int = NO_PARTITION) -> MessageId:
    """The id answered for a publish recognised as a duplicate (§4.9): -1:-1."""
    return MessageId(-1, -1, partition)


def parse_start(text: str) -> MessageId:
    """A reader's ``messageId`` query parameter: ``earliest``, ``latest`` or base64."""
    if text == "earliest":
        return EARLIEST_ID
    if text == "latest":
        return LATEST_ID
    return MessageId.from_base64(text)


def _is_decimal(part: str) -> bool:
    digits = part[1:] if part.startswith("-") else part
    return digits.isascii() and digits.isdigit()


def _put_field(out: bytearray, number: int, value: int) -> None:
    out.append(number << 3 | _WIRE_VARINT)
    _put_varint(out, value & _U64_MASK)


def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise MessageIdError("truncated varint")
        byte = data[pos]
        pos += 1
        if shift == 63 and byte > 1:
            raise MessageIdError("varint longer than 64 bits")
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _skip_field(data: bytes, pos: int, wire: int) -> int:
    if wire == _WIRE_VARINT:
        return _read_varint(data, pos)[1]
    if wire == _WIRE_LENGTH:
        length, pos = _read_varint(data, pos)
        end = pos + length
    elif wire == _WIRE_FIXED64:
        end = pos + 8
    elif wire == _WIRE_FIXED32:
        end = pos + 4
    else:
        raise MessageIdError(f"unsupported wire type {wire}")
    if end > len(data):
        raise MessageIdError("truncated field")
    return end


BATCH_RESTS_CACHED = 32  # (carry, entry size) pairs whose ids' rests are kept: 2.2 MB at most


def entry_ids_base64(ledger_id: int, entry_id: int, partition: int, count: int) -> list[str]:
    """Base64 ids of the ``count`` messages of one entry, byte-identical to
    ``MessageId(...).to_base64()`` (the publish path answers every message of a batch
    entry with its id). The entry's own field is encoded afresh, the ledger's and the
    partition's come from caches: with many topics an entry often holds one message,
    and a cache of whole entry prefixes would miss every time."""
    prefix = ledger_field(ledger_id) + entry_field(entry_id) + partition_field(partition)
    head, carry = ids_head_base64(prefix)
    if count == 1:
        return [head + _no_batch_rest_base64(carry)]
    return [head + rest for rest in _batch_rests_base64(carry, count)]


def ids_head_base64(prefix: bytes) -> tuple[str, bytes]:
    """An entry's id prefix (``entry_prefix``) split for base64, which encodes each
    3-byte group on its own: its whole groups encoded once for every message of the
    entry, and the 0-2 bytes left over (the carry), which ``id_rest_base64`` encodes
    with each message's own fields."""
    whole = len(prefix) - len(prefix) % 3
    return b64encode_as_string(prefix[:whole]), prefix[whole:]


def id_rest_base64(carry: bytes, batch_index: int, batch_size: int) -> str:
    """What follows ``ids_head_base64``'s head in a message's base64 id: the carry and
    the batch fields (``NO_BATCH_TAIL`` for a message alone in its entry, size 0)."""
    if not batch_size:
        return _no_batch_rest_base64(carry)
    return _batch_rests_base64(carry, batch_size)[batch_index]


@functools.lru_cache(maxsize=256)  # one per carry (0-2 bytes) in use
def _no_batch_rest_base64(carry: bytes) -> str:
    return b64encode_as_string(carry + NO_BATCH_TAIL)


@functools.lru_cache(maxsize=BATCH_RESTS_CACHED)
def _batch_rests_base64(carry: bytes, count: int) -> tuple[str, ...]:
    """base64 of ``carry + batch_tail(index, count)`` for each index of an entry of
    ``count`` messages (``carry``: 0-2 bytes; about 70 bytes an index, as str objects)."""
    return tuple(b64encode_as_string(carry + batch_tail(index, count)) for index in range(count))


@functools.lru_cache(maxsize=4096)
def entry_prefix(ledger_id: int, entry_id: int, partition: int) -> bytes:
    """The encoded fields every message id of one entry starts with; an id is this
    plus ``NO_BATCH_TAIL`` or ``batch_tail(...)``, base64-encoded (no validation: for
    ids the gateway itself made)."""
    return ledger_field(ledger_id) + entry_field(entry_id) + partition_field(partition)


@functools.lru_cache(maxsize=4096)  # one per ledger a topic writes or is read from
def ledger_field(ledger_id: int) -> bytes:
    """The encoded ledgerId field (1) of an id."""
    out = bytearray()
    _put_field(out, _FIELD_LEDGER, ledger_id)
    return bytes(out)


def entry_field(entry_id: int) -> bytes:
    """The encoded entryId field (2) of an id."""
    if 0 <= entry_id < 0x80:  # one varint byte: a ledger's first 128 entries
        return bytes((_FIELD_ENTRY << 3, entry_id))
    out = bytearray()
    _put_field(out, _FIELD_ENTRY, entry_id)
    return bytes(out)


@functools.lru_cache(maxsize=1024)
def partition_field(partition: int) -> bytes:
    """The encoded partition field (3) of an id; empty for a non-partitioned topic (-1)."""
    if partition < 0:
        return b""
    out = bytearray()
    _put_field(out, _FIELD_PARTITION, partition)
    return bytes(out)


NO_BATCH_TAIL = b"\x30\x00"  # batch_index 0 (proto3 default written out, as Pulsar does)


@functools.lru_cache(maxsize=65536)  # batch indices repeat for every entry of a size
def batch_tail(batch_index: int, batch_size: int) -> bytes:
    """The id fields after ``entry_prefix`` of message ``batch_index`` of ``batch_size``."""
    tail = bytearray()
    _put_field(tail, _FIELD_BATCH_INDEX, batch_index)
    _put_field(tail, _FIELD_BATCH_SIZE, batch_size)
    return bytes(tail)
