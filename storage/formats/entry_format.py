"""How a batch of published messages becomes one ledger entry payload (pure).

Owns: ``EntryMessage`` (a message as stored, with the schema version it was
encoded with - docs/decisions/0010-schema-registry.md), the version-1 binary layout of
an entry (docs/decisions/0004-entry-batch-format.md), its encoder
(``encode_entry``, and ``EntryBatch`` for a batcher that fills an entry
message by message), its decoder (``decode_entry``, ``entry_message_count``)
and the bounds of an entry (``MESSAGES_PER_ENTRY_MAX``, ``ENTRY_BYTES_MAX``).

Rule: the storage layer treats entries as opaque bytes; this module is the only
place that knows their inside. A message's batch index is its position in the
entry. Encoding is ``struct``-based (no JSON on the hot path); every length is
checked on decode, and anything that is not exactly a valid entry raises
``CorruptEntry``. A message that cannot fit in an entry on its own raises
``MessageTooLarge``; other out-of-bounds fields raise ``InvalidMessage``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from storage.formats.errors import CorruptEntry, InvalidMessage, MessageTooLarge
from storage.wire import MAX_ENTRY_PAYLOAD_BYTES

FORMAT_VERSION = 1
MESSAGES_PER_ENTRY_MAX = 1000  # Pulsar's batchingMaxMessages default
ENTRY_BYTES_MAX = MAX_ENTRY_PAYLOAD_BYTES  # the whole entry must fit a storage-node entry (5 MiB)
PRODUCER_NAME_BYTES_MAX = 0xFFFF  # u16 length
PROPERTIES_PER_MESSAGE_MAX = 0xFFFF  # u16 count
PROPERTY_NAME_BYTES_MAX = 0xFFFF  # u16 length

_ENTRY_HEAD = struct.Struct(">BH")  # version, message count
_MESSAGE_HEAD = struct.Struct(
    ">BHqqHI"
)  # flags, property count, publish time, sequence id, name len, payload len
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_PROPERTY_HEAD = struct.Struct(">HI")  # name len, value len
ENTRY_HEADER_BYTES = _ENTRY_HEAD.size

_HAS_EVENT_TIME = 0x01
_HAS_DELIVER_AT = 0x02
_HAS_KEY = 0x04
_HAS_ORDERING_KEY = 0x08
_HAS_SCHEMA_VERSION = 0x10  # docs/decisions/0010-schema-registry.md
_KNOWN_FLAGS = _HAS_EVENT_TIME | _HAS_DELIVER_AT | _HAS_KEY | _HAS_ORDERING_KEY | _HAS_SCHEMA_VERSION
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MESSAGE_BYTES_MAX = ENTRY_BYTES_MAX - ENTRY_HEADER_BYTES
_SHORT_NAME_BYTES = 1024  # encode_message's fast path: a producer name up to this long ...
_SHORT_MESSAGE_OVERHEAD = 32 + _SHORT_NAME_BYTES  # ... so a message head + name fits this
_NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})  # shared by decoded messages without any


@dataclass(slots=True)  # treated as immutable; not frozen: built per message, frozen init costs ~2x
class EntryMessage:
    """One message inside an entry. Times are epoch milliseconds; ``key`` is the
    partition key and ``ordering_key`` the Key_Shared ordering key (both raw
    bytes); ``deliver_at_ms`` is set for delayed delivery."""

    payload: bytes
    publish_time_ms: int
    producer_name: str
    sequence_id: int
    key: bytes | None = None
    ordering_key: bytes | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    event_time_ms: int | None = None
    deliver_at_ms: int | None = None
    schema_version: int | None = None  # the topic schema version the payload was encoded with


def encode_message(message: EntryMessage) -> bytes:
    """The bytes of one message inside an entry (validated). The usual message (no
    optional field, no property; a short producer name) takes one pack and one join."""
    payload = message.payload
    publish, sequence = message.publish_time_ms, message.sequence_id
    if (
        message.event_time_ms is None
        and message.deliver_at_ms is None
        and message.key is None
        and message.ordering_key is None
        and message.schema_version is None
        and not message.properties
        and type(publish) is int
        and type(sequence) is int
        and _INT64_MIN <= publish <= _INT64_MAX
        and _INT64_MIN <= sequence <= _INT64_MAX
        and len(payload) <= _MESSAGE_BYTES_MAX - _SHORT_MESSAGE_OVERHEAD
    ):
        name = _producer_name_bytes(message.producer_name)
        if len(name) <= _SHORT_NAME_BYTES:
            head = _MESSAGE_HEAD.pack(0, 0, publish, sequence, len(name), len(payload))
            return b"".join((head, name, payload))
    return _encode_message_checked(message)


@functools.lru_cache(maxsize=1024)
def _producer_name_bytes(name: str) -> bytes:
    return _utf8(name, "producer name")


def _encode_message_checked(message: EntryMessage) -> bytes:
    flags = 0
    optional: list[bytes] = []
    for flag, value in ((_HAS_EVENT_TIME, message.event_time_ms), (_HAS_DELIVER_AT, message.deliver_at_ms)):
        if value is not None:
            flags |= flag
            optional.append(_I64.pack(_int64(value, "time")))
    for flag, raw in ((_HAS_KEY, message.key), (_HAS_ORDERING_KEY, message.ordering_key)):
        if raw is not None:
            flags |= flag
            optional.append(_U32.pack(_length(len(raw), 0xFFFFFFFF, "key")))
            optional.append(raw)
    if message.schema_version is not None:
        flags |= _HAS_SCHEMA_VERSION
        optional.append(_I64.pack(_int64(message.schema_version, "schema version")))
    name = _utf8(message.producer_name, "producer name")
    properties = message.properties
    _length(len(properties), PROPERTIES_PER_MESSAGE_MAX, "property count")
    head = _MESSAGE_HEAD.pack(
        flags,
        len(properties),
        _int64(message.publish_time_ms, "publish time"),
        _int64(message.sequence_id, "sequence id"),
        _length(len(name), PRODUCER_NAME_BYTES_MAX, "producer name"),
        _length(len(message.payload), _MESSAGE_BYTES_MAX, "payload"),
    )
    parts = [head, *optional, name]
    for prop_name, prop_value in properties.items():
        name_bytes = _utf8(prop_name, "property name")
        value_bytes = _utf8(prop_value, "property value")
        _length(len(name_bytes), PROPERTY_NAME_BYTES_MAX, "property name")
        parts += (_PROPERTY_HEAD.pack(len(name_bytes), len(value_bytes)), name_bytes, value_bytes)
    parts.append(message.payload)
    data = b"".join(parts)
    if len(data) > _MESSAGE_BYTES_MAX:
        raise MessageTooLarge(f"message of {len(data)} bytes exceeds {_MESSAGE_BYTES_MAX} (entry limit)")
    return data


def encode_entry(messages: Sequence[EntryMessage]) -> bytes:
    """One entry holding ``messages`` (1..MESSAGES_PER_ENTRY_MAX, <= ENTRY_BYTES_MAX)."""
    batch = EntryBatch()
    for message in messages:
        if not batch.add(message):
            raise InvalidMessage(f"{len(messages)} messages do not fit in one entry")
    return batch.encode()


class EntryBatch:
    """Accumulates encoded messages for one entry. ``add`` returns False when the
    message would break a bound (cut the entry and start a new batch); it raises
    ``MessageTooLarge`` if the message could not fit even in an empty entry."""

    def __init__(self, messages_max: int = MESSAGES_PER_ENTRY_MAX, bytes_max: int = ENTRY_BYTES_MAX) -> None:
        assert 1 <= messages_max <= MESSAGES_PER_ENTRY_MAX
        assert ENTRY_HEADER_BYTES < bytes_max <= ENTRY_BYTES_MAX
        self._messages_max = messages_max
        self._bytes_max = bytes_max
        self._parts: list[bytes] = []
        self._size = ENTRY_HEADER_BYTES

    def add(self, message: EntryMessage) -> bool:
        if len(self._parts) >= self._messages_max:
            return False
        data = encode_message(message)
        if ENTRY_HEADER_BYTES + len(data) > self._bytes_max:
            raise MessageTooLarge(f"message of {len(data)} bytes exceeds the entry limit {self._bytes_max}")
        if self._size + len(data) > self._bytes_max:
            return False
        self._parts.append(data)
        self._size += len(data)
        return True

    def __len__(self) -> int:
        return len(self._parts)

    @property
    def size_bytes(self) -> int:
        """Bytes of the entry if encoded now (header included)."""
        return self._size

    def encode(self) -> bytes:
        assert self._parts, "an entry holds at least one message"
        return _ENTRY_HEAD.pack(FORMAT_VERSION, len(self._parts)) + b"".join(self._parts)


def join_entry(parts: Sequence[bytes]) -> bytes:
    """One entry from messages already encoded with ``encode_message`` (the
    caller keeps within the bounds, as ``publish_core.PublishBatcher`` does)."""
    assert 1 <= len(parts) <= MESSAGES_PER_ENTRY_MAX
    return _ENTRY_HEAD.pack(FORMAT_VERSION, len(parts)) + b"".join(parts)


def entry_message_count(payload: bytes) -> int:
    """The number of messages in an entry, from its header only."""
    return _read_head(payload)


def decode_entry(payload: bytes) -> list[EntryMessage]:
    """The messages of an entry, in batch-index order; ``CorruptEntry`` on any defect.
    Messages without properties share one read-only empty mapping, and a producer name
    equal to the previous message's (the usual case in a batch) is decoded once."""
    count = _read_head(payload)
    data = payload if isinstance(payload, bytes) else bytes(payload)
    end = len(data)
    pos = ENTRY_HEADER_BYTES
    messages: list[EntryMessage] = []
    unpack_head = _MESSAGE_HEAD.unpack_from
    head_size = _MESSAGE_HEAD.size
    last_raw_name: bytes | None = None
    name = ""
    try:
        for _ in range(count):
            flags, n_props, publish, sequence, name_len, payload_len = unpack_head(data, pos)
            pos += head_size
            event_time = deliver_at = schema_version = None
            key = ordering_key = None
            if flags:
                if flags & ~_KNOWN_FLAGS:
                    raise CorruptEntry(f"unknown message flags {flags:#x}")
                if flags & _HAS_EVENT_TIME:
                    (event_time,) = _I64.unpack_from(data, pos)
                    pos += 8
                if flags & _HAS_DELIVER_AT:
                    (deliver_at,) = _I64.unpack_from(data, pos)
                    pos += 8
                if flags & _HAS_KEY:
                    key, pos = _read_sized(data, pos, end)
                if flags & _HAS_ORDERING_KEY:
                    ordering_key, pos = _read_sized(data, pos, end)
                if flags & _HAS_SCHEMA_VERSION:
                    (schema_version,) = _I64.unpack_from(data, pos)
                    pos += 8
            stop = pos + name_len
            if stop > end:
                raise CorruptEntry("text runs past the end of the entry")
            raw_name = data[pos:stop]
            if raw_name != last_raw_name:
                name = _text(raw_name)
                last_raw_name = raw_name
            pos = stop
            properties: Mapping[str, str] = _NO_PROPERTIES
            if n_props:
                props: dict[str, str] = {}
                for _ in range(n_props):
                    prop_name_len, prop_value_len = _PROPERTY_HEAD.unpack_from(data, pos)
                    pos += _PROPERTY_HEAD.size
                    prop_name, pos = _read_text(data, pos, pos + prop_name_len, end)
                    if prop_name in props:
                        raise CorruptEntry(f"property {prop_name!r} repeated")
                    props[prop_name], pos = _read_text(data, pos, pos + prop_value_len, end)
                properties = props
            stop = pos + payload_len
            if stop > end:
                raise CorruptEntry("payload runs past the end of the entry")
            messages.append(
                EntryMessage(
                    data[pos:stop],
                    publish,
                    name,
                    sequence,
                    key,
                    ordering_key,
                    properties,
                    event_time,
                    deliver_at,
                    schema_version,
                )
            )
            pos = stop
    except struct.error as exc:
        raise CorruptEntry(f"entry truncated: {exc}") from exc
    if pos != end:
        raise CorruptEntry(f"{end - pos} trailing bytes after {count} messages")
    return messages


def _read_head(payload: bytes) -> int:
    if len(payload) > ENTRY_BYTES_MAX:
        raise CorruptEntry(f"entry of {len(payload)} bytes exceeds {ENTRY_BYTES_MAX}")
    if len(payload) < ENTRY_HEADER_BYTES:
        raise CorruptEntry(f"entry of {len(payload)} bytes has no header")
    version, count = _ENTRY_HEAD.unpack_from(payload, 0)
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"unknown entry format version {version}")
    if not 1 <= count <= MESSAGES_PER_ENTRY_MAX:
        raise CorruptEntry(f"message count {count} outside [1, {MESSAGES_PER_ENTRY_MAX}]")
    return int(count)


def _read_sized(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    (length,) = _U32.unpack_from(data, pos)
    pos += 4
    if pos + length > end:
        raise CorruptEntry("key runs past the end of the entry")
    return data[pos : pos + length], pos + length


def _read_text(data: bytes, pos: int, stop: int, end: int) -> tuple[str, int]:
    if stop > end:
        raise CorruptEntry("text runs past the end of the entry")
    return _text(data[pos:stop]), stop


def _text(raw: bytes) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptEntry("text is not UTF-8") from exc


def _int64(value: int, what: str) -> int:
    if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidMessage(f"{what} {value!r} is not a 64-bit integer")
    return value


def _length(length: int, limit: int, what: str) -> int:
    if length > limit:
        raise MessageTooLarge(f"{what} of {length} exceeds {limit}")
    return length


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessage(f"{what} is not valid Unicode text") from exc
