"""A session's outbound frames: a delivery burst goes straight to the socket, behind what waits."""

from __future__ import annotations

from typing import Any

from gateway.api.ws_outbound import Outbound


class FakeWriter:
    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []
        self.taking = True  # the transport takes data (uvicorn would write at once)

    def ready(self) -> bool:
        return self.taking

    def write(self, frames: list[bytes]) -> None:
        self.writes.append(list(frames))

    def buffered(self) -> int:
        return 0


def outbound() -> tuple[Outbound, FakeWriter]:
    out = Outbound(None)  # type: ignore[arg-type]  # only the writer is used below
    writer = FakeWriter()
    out._writer = writer  # type: ignore[assignment]
    out._open = True
    return out, writer


async def test_a_burst_with_nothing_waiting_is_one_write_of_the_same_frames() -> None:
    out, writer = outbound()
    frames = [b"a", b"b", b"c"]
    out.send_burst(frames)
    assert writer.writes == [frames] and out.pending_bytes() == 0


async def test_a_burst_goes_behind_the_frames_waiting_for_the_rounds_end() -> None:
    out, writer = outbound()
    out.send(b"ack")  # a reply waits for the end of the loop round
    out.send_burst([b"m1", b"m2"])
    assert writer.writes == [[b"ack", b"m1", b"m2"]]  # in order, one write


async def test_a_burst_waits_while_the_socket_takes_nothing_and_none_after_the_close() -> None:
    out, writer = outbound()
    writer.taking = False
    out._writer = writer  # type: ignore[assignment]
    sent: list[Any] = []

    async def send_text(text: str) -> None:  # the ASGI send, which waits for the transport
        sent.append(text)

    out.websocket = type("WS", (), {"send_text": staticmethod(send_text)})()  # type: ignore[assignment]
    out.send_burst([b"m1", b"m2"])
    assert writer.writes == [] and sent == ["m1", "m2"]  # through the ASGI send, in order
    out.closed = True
    out.send_burst([b"late"])
    assert sent == ["m1", "m2"]
