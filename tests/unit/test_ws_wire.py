"""The lean WebSocket framing reads and writes exactly what the websockets library does."""

from __future__ import annotations

import os

import pytest
from websockets.frames import Frame, Opcode
from websockets.server import ServerProtocol

from gateway.protocol.ws_wire import OP_BINARY, OP_TEXT, Stop, read_data_frames, text_frames

SIZES = [0, 1, 125, 126, 127, 65535, 65536, 70000]


def client_frame(opcode: Opcode, data: bytes, fin: bool = True) -> bytes:
    return Frame(opcode, data, fin).serialize(mask=True, extensions=[])


def test_data_frames_of_every_length_form_are_read_unmasked_in_order() -> None:
    payloads = [os.urandom(n) for n in SIZES]
    wire = b"".join(client_frame(Opcode.BINARY if i % 2 else Opcode.TEXT, p) for i, p in enumerate(payloads))
    scan = read_data_frames(wire, 0, 1 << 24)
    assert scan.stop is Stop.MORE and scan.end == len(wire)
    assert [bytes(p) for _, p in scan.frames] == payloads
    assert [op for op, _ in scan.frames] == [OP_BINARY if i % 2 else OP_TEXT for i in range(len(SIZES))]


@pytest.mark.parametrize("size", [5, 200, 70000])
def test_a_frame_cut_anywhere_waits_for_the_bytes_it_needs(size: int) -> None:
    wire = client_frame(Opcode.TEXT, b"a" * size)
    for cut in sorted(c for c in {0, 1, 2, 3, 4, 5, 9, 13, len(wire) - 1} if c < len(wire)):
        scan = read_data_frames(wire[:cut], 0, 1 << 24)
        assert scan.stop is Stop.MORE and scan.frames == [] and scan.end == 0
        assert cut < scan.frame_end <= len(wire)  # never asks for more than the frame
    assert read_data_frames(wire, 0, 1 << 24).frames == [(OP_TEXT, b"a" * size)]


def test_control_frames_and_fragments_are_left_whole_for_the_library() -> None:
    first = client_frame(Opcode.TEXT, b"one")
    for other in (
        client_frame(Opcode.PING, b"p"),
        client_frame(Opcode.PONG, b""),
        client_frame(Opcode.CLOSE, b"\x03\xe8"),
        client_frame(Opcode.TEXT, b"frag", fin=False),
        client_frame(Opcode.CONT, b"ment"),
    ):
        scan = read_data_frames(first + other + first, 0, 1 << 24)
        assert scan.frames == [(OP_TEXT, b"one")]
        assert scan.stop is Stop.OTHER and scan.end == len(first)
        assert scan.frame_end == len(first) + len(other)
    scan = read_data_frames(first, 0, 1 << 24, data_ok=False)  # a fragmented message is under way
    assert scan.frames == [] and scan.stop is Stop.OTHER and scan.frame_end == len(first)


def test_headers_the_library_must_judge_stop_the_reading() -> None:
    unmasked = Frame(Opcode.TEXT, b"x").serialize(mask=False, extensions=[])
    for bad in (
        unmasked,
        bytes((0xC1,)) + client_frame(Opcode.TEXT, b"x")[1:],  # RSV1 without an extension
        bytes((0x83, 0x80)) + b"\0\0\0\0",  # opcode 3 is reserved
        client_frame(Opcode.TEXT, b"y" * 200),  # longer than the bound below
    ):
        scan = read_data_frames(client_frame(Opcode.TEXT, b"ok") + bad, 0, 100)
        assert scan.frames == [(OP_TEXT, b"ok")] and scan.stop is Stop.INVALID and scan.end == 8


def test_server_text_frames_are_the_librarys_bytes() -> None:
    conn = ServerProtocol()
    conn.state = conn.state.OPEN
    payloads = [b"x" * n for n in SIZES]
    for payload in payloads:
        conn.send_text(payload)
    assert text_frames(payloads) == b"".join(conn.data_to_send())
