"""The gateway's WebSocket protocol hands an accepted session's frames to its inbox, bounded in bytes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState
from websockets.exceptions import InvalidState
from websockets.frames import Frame, Opcode

from gateway.api.ws_server import FRAME_OVERHEAD, INBOX_BYTES, FrameInbox, GatewayWebSocketProtocol
from gateway.api.ws_writer import FrameWriter


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.paused = 0
        self.resumed = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def pause_reading(self) -> None:
        self.paused += 1

    def resume_reading(self) -> None:
        self.resumed += 1

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5555), "sockname": ("127.0.0.1", 8080)}.get(name, default)


def client_frame(opcode: Opcode, data: bytes, fin: bool = True) -> bytes:
    return Frame(opcode, data, fin).serialize(mask=True, extensions=[])


async def accepted_session() -> tuple[GatewayWebSocketProtocol, FakeTransport, FrameInbox]:
    accepted = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        accepted.set()
        with contextlib.suppress(asyncio.CancelledError):  # the test's end
            await asyncio.sleep(3600)  # the session's handler reads the inbox from here on

    config = Config(app=app, lifespan="off", proxy_headers=False, ws_ping_interval=None, log_level="warning")
    config.load()
    protocol = GatewayWebSocketProtocol(config, ServerState(), {})
    transport = FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    key = base64.b64encode(os.urandom(16)).decode()
    protocol.data_received(
        (
            "GET /ws/v2/producer/persistent/t/ns/topic HTTP/1.1\r\nHost: localhost\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    await asyncio.wait_for(accepted.wait(), 5)
    # a frame received before the handler takes the frames still reaches it, first
    protocol.data_received(client_frame(Opcode.TEXT, b'{"payload":"first"}'))
    return protocol, transport, protocol.take_frames()


async def test_frames_reach_the_inbox_in_order_and_the_close_ends_it() -> None:
    protocol, transport, inbox = await accepted_session()
    protocol.data_received(
        client_frame(Opcode.TEXT, b'{"payload":"second"}') + client_frame(Opcode.BINARY, b"\xffthird")
    )
    assert inbox.pop() == '{"payload":"first"}'
    assert inbox.pop() == '{"payload":"second"}'
    assert inbox.pop() == "\ufffdthird"  # a binary frame's text, decoded with replacement
    assert inbox.pop() is None
    assert transport.paused == transport.resumed  # a frame does not pause the socket
    protocol.data_received(client_frame(Opcode.TEXT, b"last") + client_frame(Opcode.CLOSE, b"\x03\xe8"))
    assert await asyncio.wait_for(inbox.wait(), 1) is True
    assert inbox.pop() == "last"
    assert await asyncio.wait_for(inbox.wait(), 1) is False  # ended after the frames before the close


async def test_a_text_frame_that_is_not_utf8_closes_1007_and_ends_the_inbox() -> None:
    protocol, transport, inbox = await accepted_session()
    protocol.data_received(client_frame(Opcode.TEXT, b"\xff\xfe"))
    assert inbox.pop() == '{"payload":"first"}'
    assert inbox.pop() is None
    assert await asyncio.wait_for(inbox.wait(), 1) is False
    assert b"\x03\xef" in b"".join(transport.written)  # close code 1007
    assert protocol.close_sent


async def test_reading_pauses_past_the_inbox_bound_and_resumes_below_half() -> None:
    protocol, transport, inbox = await accepted_session()
    inbox.pop()
    paused, resumed = transport.paused, transport.resumed  # uvicorn paused at the frame before the take
    frame = b"x" * 1000
    per_frame = len(frame) + FRAME_OVERHEAD
    over = INBOX_BYTES // per_frame + 1  # the frame that takes the inbox past its bound
    protocol.data_received(b"".join(client_frame(Opcode.TEXT, frame) for _ in range(over - 1)))
    assert transport.paused == paused and inbox.bytes <= INBOX_BYTES
    protocol.data_received(client_frame(Opcode.TEXT, frame) * 3)  # one read may land past the bound
    assert transport.paused == paused + 1 and protocol.read_paused
    assert inbox.bytes == (over + 2) * per_frame
    while inbox.bytes - per_frame > INBOX_BYTES // 2:
        assert inbox.pop() is not None
        assert transport.resumed == resumed  # still above half the bound: the socket stays paused
    assert inbox.pop() is not None
    assert transport.resumed == resumed + 1 and not protocol.read_paused


async def test_frames_split_across_reads_and_control_frames_between_them() -> None:
    protocol, transport, inbox = await accepted_session()
    assert protocol._lean  # the frames are read below the library from here on
    wire = (
        client_frame(Opcode.TEXT, b"a" * 130)
        + client_frame(Opcode.PING, b"hi")
        + client_frame(Opcode.TEXT, b"frag", fin=False)
        + client_frame(Opcode.PING, b"in")  # a control frame inside a fragmented message
        + client_frame(Opcode.CONT, b"mented")
        + client_frame(Opcode.BINARY, b"b" * 70000)
        + client_frame(Opcode.TEXT, b"end")
    )
    written = len(transport.written)
    for at in range(0, len(wire), 7):  # every frame cut somewhere, most headers too
        protocol.data_received(wire[at : at + 7])
    texts = []
    while (text := inbox.pop()) is not None:
        texts.append(text)
    assert texts == ['{"payload":"first"}', "a" * 130, "fragmented", "b" * 70000, "end"]
    pongs = b"".join(transport.written[written:])
    assert pongs == Frame(Opcode.PONG, b"hi").serialize(mask=False, extensions=[]) + Frame(
        Opcode.PONG, b"in"
    ).serialize(mask=False, extensions=[])
    assert protocol._lean and not transport.closed


async def test_a_session_taken_mid_frame_is_read_by_the_library_until_its_end() -> None:
    protocol, _transport, inbox = await accepted_session()
    protocol._lean = False
    wire = client_frame(Opcode.TEXT, b"whole")
    protocol.data_received(wire[:6])  # header and mask: the library waits for the payload
    assert not protocol._at_frame_boundary()
    protocol.data_received(wire[6:] + client_frame(Opcode.TEXT, b"next"))
    assert protocol._lean  # back at a frame boundary: lean again
    protocol.data_received(client_frame(Opcode.TEXT, b"lean"))
    assert [inbox.pop() for _ in range(4)] == ['{"payload":"first"}', "whole", "next", "lean"]


async def test_bad_frames_get_the_librarys_close_codes() -> None:
    cases = [
        (Frame(Opcode.TEXT, b"x").serialize(mask=False, extensions=[]), 1002),  # not masked
        (client_frame(Opcode.TEXT, b"x", fin=False) + client_frame(Opcode.TEXT, b"y"), 1002),
        (bytes((0x81, 0xFF)) + (17 << 20).to_bytes(8, "big") + b"\0\0\0\0", 1009),  # past ws_max_size
    ]
    for wire, code in cases:
        protocol, transport, inbox = await accepted_session()
        protocol.data_received(client_frame(Opcode.TEXT, b"before") + wire)
        assert inbox.pop() == '{"payload":"first"}' and inbox.pop() == "before" and inbox.pop() is None
        assert code.to_bytes(2, "big") in b"".join(transport.written), code
        assert transport.closed and not protocol._lean


async def test_the_frame_writer_writes_the_librarys_bytes_in_one_write_and_refuses_when_closing() -> None:
    protocol, transport, _inbox = await accepted_session()
    writer = FrameWriter(None, protocol)  # type: ignore[arg-type]  # write() needs only the protocol
    frames = [b"x" * n for n in (0, 125, 126, 65536)]
    before = len(transport.written)
    writer.write(frames)
    assert len(transport.written) == before + 1
    expected = b"".join(Frame(Opcode.TEXT, f).serialize(mask=False, extensions=[]) for f in frames)
    assert transport.written[-1] == expected
    protocol.conn.send_close(1000, "bye")
    with pytest.raises(InvalidState):
        writer.write([b"late"])
