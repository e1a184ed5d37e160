"""The node wire protocol: frames, ops, bodies and the signed entry format.

Owns: the layout of every byte that crosses a client<->node TCP connection
(docs/decisions/0001): the frames, and the proof of the cluster secret a client
may send before its first frame (whose check is storage/wire_auth.py's rule,
docs/decisions/0009-security-model.md). Sans-I/O: ``FrameDecoder.feed(bytes)`` returns the
complete frames' heads and bodies; ``encode_*`` build bytes, ``parse_*`` read
them. The node server, the node service and entry store, the client connection
and the ledger writer, reader and recovery all use this module; nothing else
knows the layout. Rule: the hot paths (an add's head and body, a reply's head,
splitting frames) are pre-bound ``struct`` packs and unpacks; a frame's body is
copied once out of the stream, an add's entry is then a memoryview slice of it.

Frame  = u32 length (of what follows) | u8 op | u64 request_id | body
Reply  = u32 length | u8 (op | 0x80) | u64 request_id | u8 status | body
Entry  = u64 ledger_id | i64 entry_id | i64 lac | u32 crc32c | payload
         (crc32c over ledger_id, entry_id, lac and payload; computed by the
         writer, stored verbatim by nodes, verified by every reader)
Add    = u8 flags (0x01: recovery add) | entry
Proof  = "FOLIOAU1" | 16-byte nonce | u64 unix time in ms | HMAC-SHA256 of those (32 bytes)
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any

import crc32c

from storage.errors import ChecksumMismatch, ProtocolViolation, Status

MAX_FRAME_BYTES = 8 * 1024 * 1024  # absurd lengths beyond this close the connection
MAX_ENTRY_PAYLOAD_BYTES = 5 * 1024 * 1024  # Pulsar's default max message size
RANGE_READ_BYTES_MAX = 4 * 1024 * 1024  # a range-read reply carries at most this (and >= 1 entry)

_LEN = struct.Struct(">I")
_REQ_HEAD = struct.Struct(">BQ")  # op, request id
_RESP_HEAD = struct.Struct(">BQB")  # op|0x80, request id, status
_REQ_FRAME_HEAD = struct.Struct(">IBQ")  # length, then the request head: what precedes a body
_RESP_FRAME_HEAD = struct.Struct(">IBQB")  # length, then the reply head
_ENTRY_HEADER = struct.Struct(">QqqI")  # ledger, entry, lac, crc32c
_CRC_HEAD = struct.Struct(">Qqq")  # what an entry's crc covers before its payload
_ADD_HEAD = struct.Struct(">BQqqI")  # an add body's flags, then the entry header
_LEDGER_ENTRY = struct.Struct(">Qq")
_RANGE = struct.Struct(">QqqI")
_READ_LAC = struct.Struct(">QqI")
_LAC_REPLY = struct.Struct(">qq")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_U8 = struct.Struct(">B")
_PROOF_TIME = struct.Struct(">Q")

RESPONSE_BIT = 0x80
FLAG_RECOVERY_ADD = 0x01
ENTRY_BYTES_MAX = _ENTRY_HEADER.size + MAX_ENTRY_PAYLOAD_BYTES  # an encoded entry, header included

# pre-bound for the hot paths
_UNPACK_LEN = _LEN.unpack_from
_PACK_REQ_FRAME_HEAD = _REQ_FRAME_HEAD.pack
_PACK_RESP_FRAME_HEAD = _RESP_FRAME_HEAD.pack
_PACK_CRC_HEAD = _CRC_HEAD.pack
_PACK_ADD_HEAD = _ADD_HEAD.pack
_UNPACK_ADD_HEAD = _ADD_HEAD.unpack_from
_UNPACK_ENTRY_HEADER = _ENTRY_HEADER.unpack_from
_CRC = crc32c.crc32c
_REQ_HEAD_SIZE = _REQ_HEAD.size
_RESP_HEAD_SIZE = _RESP_HEAD.size
_ENTRY_HEADER_SIZE = _ENTRY_HEADER.size
_CRC_HEAD_SIZE = _CRC_HEAD.size
_ADD_BYTES_MIN = _ADD_HEAD.size


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


def _entry_crc(ledger_id: int, entry_id: int, lac: int, payload: bytes | memoryview) -> int:
    return _CRC(payload, _CRC(_PACK_CRC_HEAD(ledger_id, entry_id, lac)))


def _crc_matches(entry: bytes | memoryview, crc: int) -> bool:
    """Whether an encoded entry's own bytes give ``crc`` (no copy of the payload)."""
    view = memoryview(entry)
    return _CRC(view[_ENTRY_HEADER_SIZE:], _CRC(view[:_CRC_HEAD_SIZE])) == crc


def encode_entry(ledger_id: int, entry_id: int, lac: int, payload: bytes) -> bytes:
    crc = _entry_crc(ledger_id, entry_id, lac, payload)
    return _ENTRY_HEADER.pack(ledger_id, entry_id, lac, crc) + payload


def entry_header(data: bytes | memoryview) -> tuple[int, int, int]:
    """(ledger_id, entry_id, lac) of an encoded entry, without verifying it."""
    if len(data) < _ENTRY_HEADER_SIZE:
        raise ProtocolViolation("entry shorter than its header")
    ledger_id, entry_id, lac, _ = _UNPACK_ENTRY_HEADER(data)
    return ledger_id, entry_id, lac


def decode_entry(data: bytes | memoryview) -> Entry:
    """Parse and verify an encoded entry; raises ChecksumMismatch if corrupt."""
    if len(data) < _ENTRY_HEADER_SIZE:
        raise ProtocolViolation("entry shorter than its header")
    ledger_id, entry_id, lac, crc = _UNPACK_ENTRY_HEADER(data)
    payload = bytes(data[_ENTRY_HEADER_SIZE:])
    if _entry_crc(ledger_id, entry_id, lac, payload) != crc:
        raise ChecksumMismatch(f"entry {ledger_id}:{entry_id} fails its crc32c")
    return Entry(ledger_id, entry_id, lac, payload)


def verify_entry(data: bytes | memoryview) -> bool:
    """Whether ``data`` is a whole encoded entry whose crc32c matches."""
    if len(data) < _ENTRY_HEADER_SIZE:
        return False
    return _crc_matches(data, _UNPACK_ENTRY_HEADER(data)[3])


def payload_size(entry: bytes | memoryview) -> int:
    """The payload bytes of an encoded entry."""
    return len(entry) - _ENTRY_HEADER_SIZE


# ---------------------------------------------------------------- frames


def encode_request_head(op: int, request_id: int, body_length: int) -> bytes:
    """What precedes a request's body on the wire (written with it as one vectored write)."""
    return _PACK_REQ_FRAME_HEAD(_REQ_HEAD_SIZE + body_length, op, request_id)


def encode_request(op: int, request_id: int, body: bytes = b"") -> bytes:
    return _PACK_REQ_FRAME_HEAD(_REQ_HEAD_SIZE + len(body), op, request_id) + body


def encode_response(op: int, request_id: int, status: Status, body: bytes | memoryview = b"") -> bytes:
    if body:
        head = _PACK_RESP_FRAME_HEAD(_RESP_HEAD_SIZE + len(body), op | RESPONSE_BIT, request_id, status)
        return head + body
    return _PACK_RESP_FRAME_HEAD(_RESP_HEAD_SIZE, op | RESPONSE_BIT, request_id, status)  # every add reply


Request = tuple[int, int, bytes]  # a request frame: (op, request id, body)
Response = tuple[int, int, int, bytes]  # a reply frame: (op | 0x80, request id, status code, body)
_NO_FRAMES: list[Any] = []  # the shared "no complete frame yet" result of ``feed``; never mutated


class FrameDecoder:
    """Incremental frame splitter for one direction of a connection.

    ``FrameDecoder.requests()`` (a node's side) returns ``(op, request_id, body)``
    per frame, ``FrameDecoder.responses()`` (a client's side) ``(op | 0x80,
    request_id, status code, body)``; ``body`` is a copy (``b""`` when empty).
    Bytes wait as received chunks until the frame they complete is all here, so
    every byte is copied a bounded number of times whatever the frame size (a
    growing buffer would copy a multi-MiB frame once per chunk). ``feed`` raises
    ProtocolViolation on a length shorter than the head or larger than
    ``max_frame_bytes`` (the connection is then beyond repair: close it)."""

    __slots__ = ("_have", "_head_size", "_max", "_need", "_parts", "_replies", "_unpack_head")

    def __init__(self, replies: bool, max_frame_bytes: int) -> None:
        head = _RESP_HEAD if replies else _REQ_HEAD
        self._replies = replies
        self._unpack_head = head.unpack_from
        self._head_size = head.size
        self._max = max_frame_bytes
        self._parts: list[bytes] = []  # received, not split into frames yet
        self._have = 0
        self._need = _LEN.size  # split again once this many bytes are here

    @classmethod
    def requests(cls, max_frame_bytes: int = MAX_FRAME_BYTES) -> FrameDecoder:
        return cls(False, max_frame_bytes)

    @classmethod
    def responses(cls, max_frame_bytes: int = MAX_FRAME_BYTES) -> FrameDecoder:
        return cls(True, max_frame_bytes)

    def feed(self, data: bytes) -> list[Any]:
        self._parts.append(data)
        self._have += len(data)
        if self._have < self._need:
            return _NO_FRAMES
        parts = self._parts
        buffer = parts[0] if len(parts) == 1 else b"".join(parts)
        size = len(buffer)
        offset = 0
        need = _LEN.size
        frames: list[Any] = []
        replies = self._replies
        unpack_head = self._unpack_head
        head_size = self._head_size
        body_at = 4 + head_size
        limit = self._max
        while size - offset >= 4:
            (length,) = _UNPACK_LEN(buffer, offset)
            if length < head_size or length > limit:
                raise ProtocolViolation(f"frame length {length} out of bounds")
            end = offset + 4 + length
            if end > size:
                need = end - offset
                break
            start = offset + body_at
            body = buffer[start:end] if end > start else b""  # the one copy of a body
            if replies:
                op, request_id, status = unpack_head(buffer, offset + 4)
                frames.append((op, request_id, status, body))
            else:
                op, request_id = unpack_head(buffer, offset + 4)
                frames.append((op, request_id, body))
            offset = end
        rest = buffer[offset:] if offset else buffer
        self._parts = [rest] if rest else []
        self._have = len(rest)
        self._need = need
        return frames

    @property
    def buffered(self) -> int:
        return self._have


# ---------------------------------------------------------------- bodies


def add_body(entry: bytes, recovery: bool = False) -> bytes:
    """The add body of an encoded entry (a recovery add re-sends one it read)."""
    return _U8.pack(FLAG_RECOVERY_ADD if recovery else 0) + entry


def encode_add_body(ledger_id: int, entry_id: int, lac: int, payload: bytes) -> bytes:
    """A writer's normal add body of a new entry (``add_body`` of ``encode_entry``),
    in one pack and one concatenation."""
    crc = _CRC(payload, _CRC(_PACK_CRC_HEAD(ledger_id, entry_id, lac)))
    return _PACK_ADD_HEAD(0, ledger_id, entry_id, lac, crc) + payload


def parse_add(body: bytes | memoryview) -> tuple[bool, int, int, int, bytes | memoryview]:
    """(is_recovery_add, ledger_id, entry_id, lac, encoded entry) of a verified add
    body; the entry is a slice of ``body`` (no copy when ``body`` is a memoryview).
    Raises ProtocolViolation (too short) or ChecksumMismatch (corrupt)."""
    if len(body) < _ADD_BYTES_MIN:
        raise ProtocolViolation("add body too short")
    flags, ledger_id, entry_id, lac, crc = _UNPACK_ADD_HEAD(body)
    entry = body[1:]
    if _CRC(entry[_ENTRY_HEADER_SIZE:], _CRC(entry[:_CRC_HEAD_SIZE])) != crc:
        raise ChecksumMismatch(f"entry {ledger_id}:{entry_id} fails its crc32c")
    return flags & FLAG_RECOVERY_ADD != 0, ledger_id, entry_id, lac, entry


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


# ---------------------------------------------------------------- the proof before the first frame

PROOF_MAGIC = b"FOLIOAU1"
PROOF_NONCE_BYTES = 16
_PROOF_NONCE_AT = len(PROOF_MAGIC)
_PROOF_TIME_AT = _PROOF_NONCE_AT + PROOF_NONCE_BYTES
_PROOF_SIGNED_BYTES = _PROOF_TIME_AT + _PROOF_TIME.size
PROOF_BYTES = _PROOF_SIGNED_BYTES + 32  # the MAC: HMAC-SHA256


def proof_signed(nonce: bytes, now_ms: int) -> bytes:
    """The part of a proof its MAC signs (the MAC follows it)."""
    return PROOF_MAGIC + nonce + _PROOF_TIME.pack(now_ms)


def parse_proof(data: bytes) -> tuple[bytes, bytes, int, bytes] | None:
    """(signed part, nonce, time in ms, MAC) of a proof; None if ``data`` is not one."""
    if len(data) != PROOF_BYTES or not data.startswith(PROOF_MAGIC):
        return None
    (sent_ms,) = _PROOF_TIME.unpack_from(data, _PROOF_TIME_AT)
    return (
        data[:_PROOF_SIGNED_BYTES],
        data[_PROOF_NONCE_AT:_PROOF_TIME_AT],
        sent_ms,
        data[_PROOF_SIGNED_BYTES:],
    )
