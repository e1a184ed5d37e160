"""The node wire protocol: frames, ops, bodies and the signed entry format (pure).

Owns: every byte that crosses a client<->node TCP connection (docs/decisions/0001).
Sans-I/O: ``FrameDecoder.feed(bytes)`` returns complete frames; ``encode_*``
build bytes. Both the node server and the client connection use this module;
nothing else knows the layout.

Frame  = u32 length (of what follows) | u8 op | u64 request_id | body
Reply  = u32 length | u8 (op | 0x80) | u64 request_id | u8 status | body
Entry  = u64 ledger_id | i64 entry_id | i64 lac | u32 crc32c | payload
         (crc32c over ledger_id, entry_id, lac and payload; computed by the
         writer, stored verbatim by nodes, verified by every reader)
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

from storage.errors import ChecksumMismatch, ProtocolViolation, Status

MAX_FRAME_BYTES = 8 * 1024 * 1024  # absurd lengths beyond this close the connection
MAX_ENTRY_PAYLOAD_BYTES = 5 * 1024 * 1024  # Pulsar's default max message size
RANGE_READ_BYTES_MAX = 4 * 1024 * 1024  # a range-read reply carries at most this (and >= 1 entry)

_LEN = struct.Struct(">I")
_REQ_HEAD = struct.Struct(">BQ")  # op, request id
_RESP_HEAD = struct.Struct(">BQB")  # op|0x80, request id, status
ENTRY_HEADER = struct.Struct(">QqqI")  # ledger, entry, lac, crc32c
_LEDGER_ENTRY = struct.Struct(">Qq")
_RANGE = struct.Struct(">QqqI")
_READ_LAC = struct.Struct(">QqI")
_LAC_REPLY = struct.Struct(">qq")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_U8 = struct.Struct(">B")

RESPONSE_BIT = 0x80
FLAG_RECOVERY_ADD = 0x01


class Op(enum.IntEnum):
    ADD = 1
    READ = 2
    READ_RANGE = 3
    READ_LAC = 4
    FENCE = 5
    NODE_INFO = 6


# ---------------------------------------------------------------- entries


@dataclass(frozen=True, slots=True)
class Entry:
    ledger_id: int
    entry_id: int
    lac: int
    payload: bytes


def _entry_crc(ledger_id: int, entry_id: int, lac: int, payload: bytes) -> int:
    return crc32c.crc32c(payload, crc32c.crc32c(struct.pack(">Qqq", ledger_id, entry_id, lac)))


def encode_entry(ledger_id: int, entry_id: int, lac: int, payload: bytes) -> bytes:
    crc = _entry_crc(ledger_id, entry_id, lac, payload)
    return ENTRY_HEADER.pack(ledger_id, entry_id, lac, crc) + payload


def entry_header(data: bytes | memoryview) -> tuple[int, int, int]:
    """(ledger_id, entry_id, lac) of an encoded entry, without verifying it."""
    if len(data) < ENTRY_HEADER.size:
        raise ProtocolViolation("entry shorter than its header")
    ledger_id, entry_id, lac, _ = ENTRY_HEADER.unpack_from(data)
    return ledger_id, entry_id, lac


def decode_entry(data: bytes | memoryview) -> Entry:
    """Parse and verify an encoded entry; raises ChecksumMismatch if corrupt."""
    if len(data) < ENTRY_HEADER.size:
        raise ProtocolViolation("entry shorter than its header")
    ledger_id, entry_id, lac, crc = ENTRY_HEADER.unpack_from(data)
    payload = bytes(data[ENTRY_HEADER.size :])
    if _entry_crc(ledger_id, entry_id, lac, payload) != crc:
        raise ChecksumMismatch(f"entry {ledger_id}:{entry_id} fails its crc32c")
    return Entry(ledger_id, entry_id, lac, payload)


def verify_entry(data: bytes | memoryview) -> bool:
    try:
        decode_entry(data)
    except (ChecksumMismatch, ProtocolViolation):
        return False
    return True


# ---------------------------------------------------------------- frames


@dataclass(frozen=True, slots=True)
class Request:
    op: int  # may be an unknown op number; the server answers UNKNOWN_OP
    request_id: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Response:
    op: int
    request_id: int
    status: Status
    body: bytes


def encode_request(op: int, request_id: int, body: bytes = b"") -> bytes:
    return _LEN.pack(_REQ_HEAD.size + len(body)) + _REQ_HEAD.pack(op, request_id) + body


def encode_response(op: int, request_id: int, status: Status, body: bytes = b"") -> bytes:
    return (
        _LEN.pack(_RESP_HEAD.size + len(body))
        + _RESP_HEAD.pack(op | RESPONSE_BIT, request_id, int(status))
        + body
    )


class FrameDecoder:
    """Incremental frame splitter. ``feed`` returns the complete frames'
    contents (without the length prefix); raises ProtocolViolation on a length
    that is too small or larger than ``MAX_FRAME_BYTES``."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        frames: list[bytes] = []
        offset = 0
        buffer = self._buffer
        while len(buffer) - offset >= 4:
            (length,) = _LEN.unpack_from(buffer, offset)
            if length < _REQ_HEAD.size or length > self._max:
                raise ProtocolViolation(f"frame length {length} out of bounds")
            if len(buffer) - offset - 4 < length:
                break
            frames.append(bytes(buffer[offset + 4 : offset + 4 + length]))
            offset += 4 + length
        if offset:
            del buffer[:offset]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)


def parse_request(frame: bytes) -> Request:
    if len(frame) < _REQ_HEAD.size:
        raise ProtocolViolation("request frame too short")
    op, request_id = _REQ_HEAD.unpack_from(frame)
    return Request(op, request_id, frame[_REQ_HEAD.size :])


def parse_response(frame: bytes) -> Response:
    if len(frame) < _RESP_HEAD.size:
        raise ProtocolViolation("response frame too short")
    op, request_id, status = _RESP_HEAD.unpack_from(frame)
    try:
        status_enum = Status(status)
    except ValueError as exc:
        raise ProtocolViolation(f"unknown status {status}") from exc
    return Response(op & ~RESPONSE_BIT, request_id, status_enum, frame[_RESP_HEAD.size :])


# ---------------------------------------------------------------- bodies


def add_body(entry: bytes, recovery: bool = False) -> bytes:
    return _U8.pack(FLAG_RECOVERY_ADD if recovery else 0) + entry


def parse_add(body: bytes) -> tuple[bool, bytes]:
    """(is_recovery_add, encoded entry)."""
    if len(body) < 1 + ENTRY_HEADER.size:
        raise ProtocolViolation("add body too short")
    return bool(body[0] & FLAG_RECOVERY_ADD), body[1:]


def ledger_entry_body(ledger_id: int, entry_id: int) -> bytes:
    return _LEDGER_ENTRY.pack(ledger_id, entry_id)


def parse_ledger_entry(body: bytes) -> tuple[int, int]:
    if len(body) != _LEDGER_ENTRY.size:
        raise ProtocolViolation("ledger/entry body has the wrong size")
    ledger_id, entry_id = _LEDGER_ENTRY.unpack(body)
    return ledger_id, entry_id


def range_body(ledger_id: int, first: int, last: int, max_bytes: int = RANGE_READ_BYTES_MAX) -> bytes:
    return _RANGE.pack(ledger_id, first, last, max_bytes)


def parse_range(body: bytes) -> tuple[int, int, int, int]:
    if len(body) != _RANGE.size:
        raise ProtocolViolation("range body has the wrong size")
    ledger_id, first, last, max_bytes = _RANGE.unpack(body)
    if first < 0 or last < first:
        raise ProtocolViolation(f"bad range {first}..{last}")
    return ledger_id, first, last, min(max_bytes, RANGE_READ_BYTES_MAX)


def encode_entries(entries: list[bytes]) -> bytes:
    parts = [_U32.pack(len(entries))]
    for entry in entries:
        parts.append(_U32.pack(len(entry)))
        parts.append(entry)
    return b"".join(parts)


def parse_entries(body: bytes) -> list[bytes]:
    if len(body) < 4:
        raise ProtocolViolation("range reply too short")
    (count,) = _U32.unpack_from(body)
    offset = 4
    entries: list[bytes] = []
    for _ in range(count):
        if offset + 4 > len(body):
            raise ProtocolViolation("range reply truncated")
        (length,) = _U32.unpack_from(body, offset)
        offset += 4
        if offset + length > len(body):
            raise ProtocolViolation("range reply truncated")
        entries.append(body[offset : offset + length])
        offset += length
    return entries


def read_lac_body(ledger_id: int, previous_lac: int = -1, timeout_ms: int = 0) -> bytes:
    return _READ_LAC.pack(ledger_id, previous_lac, timeout_ms)


def parse_read_lac(body: bytes) -> tuple[int, int, int]:
    if len(body) != _READ_LAC.size:
        raise ProtocolViolation("read-lac body has the wrong size")
    ledger_id, previous_lac, timeout_ms = _READ_LAC.unpack(body)
    return ledger_id, previous_lac, timeout_ms


def lac_reply(lac: int, last_entry_id: int) -> bytes:
    return _LAC_REPLY.pack(lac, last_entry_id)


def parse_lac_reply(body: bytes) -> tuple[int, int]:
    if len(body) != _LAC_REPLY.size:
        raise ProtocolViolation("lac reply has the wrong size")
    lac, last = _LAC_REPLY.unpack(body)
    return lac, last


def ledger_body(ledger_id: int) -> bytes:
    return _U64.pack(ledger_id)


def parse_ledger(body: bytes) -> int:
    if len(body) != _U64.size:
        raise ProtocolViolation("ledger body has the wrong size")
    (ledger_id,) = _U64.unpack(body)
    return int(ledger_id)
