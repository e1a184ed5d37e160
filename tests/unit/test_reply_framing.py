"""The client connection's replies, split by wire.FrameDecoder: frames come out whole
and in order, however the byte stream is cut into chunks (one byte, a frame's edge,
many MiB)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_wire import cut

from storage import wire
from storage.client.connection import _Protocol
from storage.errors import Status

pytestmark = pytest.mark.unit


class Owner:
    def __init__(self) -> None:
        self.replies: list[wire.Response] = []
        self.aborted: list[str] = []

    def _on_replies(self, replies: list[wire.Response]) -> None:
        self.replies.extend(replies)

    def _abort(self, reason: str) -> None:
        self.aborted.append(reason)


def frame(request_id: int, status: int, body: bytes) -> bytes:
    return wire.encode_response(wire.Op.READ, request_id, Status(status), body)


def feed(chunks: list[bytes]) -> Owner:
    owner = Owner()
    protocol: Any = _Protocol(owner)  # type: ignore[arg-type]
    for chunk in chunks:
        protocol.data_received(chunk)
    return owner


@pytest.mark.parametrize("sizes", [[1], [1, 2, 3, 5, 13], [4096, 65536], [262_144, 1 << 20], [7, 300_000]])
def test_every_cut_of_the_stream_gives_the_same_frames(sizes: list[int]) -> None:
    rng = random.Random(sum(sizes))
    bodies = [b"", b"x", rng.randbytes(17), rng.randbytes(3_000_000), b"", rng.randbytes(70_000)]
    if sizes == [1]:
        bodies[3] = rng.randbytes(5_000)  # a byte at a time: keep it quick
    expected = [((0x82, i + 1, i % 3), body) for i, body in enumerate(bodies)]
    stream = b"".join(frame(i, s, b) for (_, i, s), b in expected)
    owner = feed(cut(stream, rng, sizes))
    assert owner.aborted == []
    assert owner.replies == expected


def test_a_frame_split_just_before_its_end_waits_for_the_last_byte() -> None:
    data = frame(9, 0, b"abc")
    owner = feed([data[:-1]])
    assert owner.replies == []
    owner2 = feed([data[:-1], data[-1:]])
    assert owner2.replies == [((0x82, 9, 0), b"abc")]


def test_a_length_out_of_bounds_aborts_before_buffering_the_frame() -> None:
    too_long = (wire.MAX_FRAME_BYTES + 1).to_bytes(4, "big") + frame(1, 0, b"")[4:]
    owner = feed([frame(1, 0, b"ok"), too_long])
    assert owner.replies == [((0x82, 1, 0), b"ok")]
    assert owner.aborted and "out of bounds" in owner.aborted[0]
    assert feed([b"\x00\x00\x00\x02" + b"\x00" * 20]).aborted  # shorter than a reply head
