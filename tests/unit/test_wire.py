"""The node wire codec (storage/wire.py): frames split whole however the stream is
cut, request and reply heads, add bodies and the entry crc."""

from __future__ import annotations

import random

import pytest

from storage import wire
from storage.errors import ChecksumMismatch, ProtocolViolation, Status

pytestmark = pytest.mark.unit


def cut(stream: bytes, rng: random.Random, sizes: list[int]) -> list[bytes]:
    chunks = []
    at = 0
    while at < len(stream):
        step = rng.choice(sizes)
        chunks.append(stream[at : at + step])
        at += step
    return chunks


@pytest.mark.parametrize("sizes", [[1], [1, 2, 3, 5, 13], [4096, 65536], [7, 300_000]])
def test_requests_come_out_whole_and_in_order_however_the_stream_is_cut(sizes: list[int]) -> None:
    rng = random.Random(sum(sizes))
    bodies = [b"", b"x", rng.randbytes(17), rng.randbytes(3_000 if sizes == [1] else 2_000_000), b""]
    expected = [(i % 7, 2**63 + i, body) for i, body in enumerate(bodies)]
    stream = b"".join(wire.encode_request(op, rid, body) for op, rid, body in expected)
    decoder = wire.FrameDecoder.requests()
    frames = [frame for chunk in cut(stream, rng, sizes) for frame in decoder.feed(chunk)]
    assert frames == expected
    assert decoder.buffered == 0


def test_a_request_head_and_its_body_are_the_request() -> None:
    body = b"abc" * 100
    head = wire.encode_request_head(3, 2**63, len(body))
    assert head + body == wire.encode_request(3, 2**63, body)
    assert wire.FrameDecoder.requests().feed(head + body) == [(3, 2**63, body)]


def test_replies_carry_the_response_bit_and_their_status() -> None:
    decoder = wire.FrameDecoder.responses()
    data = wire.encode_response(wire.Op.ADD, 5, Status.FENCED) + wire.encode_response(
        wire.Op.READ, 6, Status.OK, memoryview(b"entry")
    )
    assert decoder.feed(data[:-1]) == [(0x81, 5, int(Status.FENCED), b"")]
    assert decoder.feed(data[-1:]) == [(0x82, 6, 0, b"entry")]


@pytest.mark.parametrize("length", [0, 8, wire.MAX_FRAME_BYTES + 1])
def test_a_frame_length_out_of_bounds_is_a_protocol_violation(length: int) -> None:
    with pytest.raises(ProtocolViolation, match="out of bounds"):
        wire.FrameDecoder.requests().feed(length.to_bytes(4, "big") + b"\x00" * 9)
    with pytest.raises(ProtocolViolation):  # a reply head is one byte longer than a request's
        wire.FrameDecoder.responses().feed((9).to_bytes(4, "big") + b"\x00" * 9)


@pytest.mark.parametrize(
    ("ledger_id", "entry_id", "lac", "payload"),
    [(0, 0, -1, b""), (7, 1, 0, b"x"), (2**64 - 1, 2**63 - 1, 2**63 - 2, bytes(range(256)) * 5)],
)
def test_an_add_body_parses_back_to_its_entry(
    ledger_id: int, entry_id: int, lac: int, payload: bytes
) -> None:
    entry = wire.encode_entry(ledger_id, entry_id, lac, payload)
    body = wire.encode_add_body(ledger_id, entry_id, lac, payload)
    assert body == wire.add_body(entry)
    assert wire.parse_add(body) == (False, ledger_id, entry_id, lac, entry)
    recovery, *head, view = wire.parse_add(memoryview(wire.add_body(entry, recovery=True)))
    assert recovery and head == [ledger_id, entry_id, lac]
    assert isinstance(view, memoryview) and bytes(view) == entry
    assert wire.entry_header(entry) == (ledger_id, entry_id, lac)
    assert wire.decode_entry(entry) == wire.Entry(ledger_id, entry_id, lac, payload)
    assert wire.verify_entry(entry) and wire.payload_size(entry) == len(payload)


def test_a_corrupt_or_short_add_is_refused() -> None:  # an entry header is 28 bytes
    body = bytearray(wire.encode_add_body(1, 2, 1, b"payload"))
    body[-1] ^= 1
    with pytest.raises(ChecksumMismatch):
        wire.parse_add(bytes(body))
    assert not wire.verify_entry(bytes(body[1:]))
    with pytest.raises(ChecksumMismatch):
        wire.decode_entry(bytes(body[1:]))
    with pytest.raises(ProtocolViolation):
        wire.parse_add(wire.add_body(b"\x00" * (27)))
    assert not wire.verify_entry(b"\x00" * (27))
