"""Small WebSocket/HTTP client helpers for messaging component tests (real sockets).

Producers send Pulsar JSON frames and match replies by ``context``; consumers
collect delivered frames and ack them. Every wait has a timeout so a broken
gateway fails a test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
from typing import Any

import orjson
import websockets
from websockets.asyncio.client import ClientConnection

TOPIC_PATH = "persistent/public/default"


def b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


class Producer:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._contexts = itertools.count()

    @classmethod
    async def connect(cls, base: str, topic: str, query: str = "") -> Producer:
        ws = await websockets.connect(f"{base}/ws/v2/producer/{TOPIC_PATH}/{topic}?{query}", open_timeout=15)
        return cls(ws)

    async def send(self, payload: bytes | str, timeout: float = 15.0, **fields: Any) -> dict[str, Any]:
        context = str(next(self._contexts))
        await self.ws.send(orjson.dumps({"payload": b64(payload), "context": context, **fields}).decode())
        reply: dict[str, Any] = orjson.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        assert reply.get("context") == context, reply
        return reply

    async def close(self) -> None:
        await self.ws.close()


class Consumer:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def connect(cls, base: str, topic: str, sub: str, query: str = "") -> Consumer:
        url = f"{base}/ws/v2/consumer/{TOPIC_PATH}/{topic}/{sub}?{query}"
        return cls(await websockets.connect(url, open_timeout=15))

    async def receive(self, timeout: float = 10.0) -> dict[str, Any]:
        while True:
            frame: dict[str, Any] = orjson.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            if "messageId" in frame and "payload" in frame:
                return frame

    async def receive_n(self, n: int, timeout: float = 15.0, ack: bool = True) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            frame = await self.receive(timeout)
            out.append(frame)
            if ack:
                await self.ack(frame["messageId"])
        return out

    async def nothing_for(self, seconds: float) -> bool:
        try:
            await self.receive(seconds)
        except TimeoutError:
            return True
        return False

    async def ack(self, message_id: str) -> None:
        await self.ws.send(orjson.dumps({"messageId": message_id}).decode())

    async def send(self, obj: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps(obj).decode())

    async def close(self) -> None:
        await self.ws.close()
