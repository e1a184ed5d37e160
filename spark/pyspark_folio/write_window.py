"""A write task's unacknowledged publish frames to one partition, and the task's byte budget (pure).

Owns: ``Window`` (one producer session's frames: sent or waiting, in order) and
``Budget`` (the bytes a task holds: rows buffered into frames plus frames not yet
acknowledged, all partitions together). Rules (docs/spark.md, Write to a topic):
- frames are answered in the order they were sent, one reply per frame carrying
  its number as ``context``; a reply for any other frame is a protocol error;
- a frame stays in the window until its reply says every message in it was
  stored; a reply with a retriable failure keeps the failed message and every
  one after it (the gateway ends the session there and publishes nothing it
  read later), the stored ones are dropped;
- after a session ends, every frame still in the window is sent again, in order,
  with the same messages (same producer name and sequence ids), so dedup stores
  each once;
- a task's unacknowledged frames count their encoded bytes against
  ``Budget.limit``; a task takes no more rows while it holds more than the
  limit, so it holds at most the limit plus one frame (and a frame larger than
  the limit cannot stall it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson


class ReplyError(Exception):
    """A reply the window cannot take: out of order, or a refusal that retrying cannot fix."""


class Verdict(Enum):
    """What a reply means for the session it came on."""

    STORED = "stored"  # the frame is done
    RESEND = "resend"  # part of it failed retriably: end the session, reconnect, resend


def encode_frame(number: int, body: bytes) -> bytes:
    """A Folio batch publish frame (docs/publishing.md §4): ``body`` is the JSON array of
    its publish objects, ``context`` the frame's number; the bytes orjson gives for
    ``{"type":"batch","context":"<number>","messages":[...]}``."""
    return b'{"type":"batch","context":"%d","messages":%b}' % (number, body)


@dataclass
class Frame:
    """One batch frame as sent: its number (the ``context`` its reply carries), its
    bytes, how many messages it holds, and the bytes it was counted as (``size``)."""

    number: int
    data: bytes
    count: int
    size: int


@dataclass
class Budget:
    """Bytes of unacknowledged frames a task holds."""

    limit: int
    used: int = 0

    @property
    def over(self) -> bool:
        return self.used > self.limit

    def take(self, size: int) -> None:
        self.used += size

    def give(self, size: int) -> None:
        self.used -= size


@dataclass
class Window:
    """One partition's frames not yet acknowledged, oldest first; ``sent`` of them went
    out on the current session."""

    frames: deque[Frame] = field(default_factory=deque)
    sent: int = 0
    next_number: int = 0
    stored: int = 0
    duplicates: int = 0

    def add(self, body: bytes, count: int) -> Frame:
        """Queue a frame of ``count`` messages, ``body`` their JSON array."""
        frame = Frame(self.next_number, b"", count, 0)
        frame.data = encode_frame(frame.number, body)
        frame.size = len(frame.data)
        self.next_number += 1
        self.frames.append(frame)
        return frame

    def unsent(self) -> list[Frame]:
        """The frames to send now (marked sent)."""
        out = list(self.frames)[self.sent :]
        self.sent = len(self.frames)
        return out

    def session_ended(self) -> None:
        """Every frame in the window goes out again on the next session."""
        self.sent = 0

    def take(self, raw: bytes | str) -> tuple[Verdict, int]:
        """Take a reply as received: when its bytes show a reply to the oldest frame sent
        whose every result is stored (``"errorCode":0`` once per message and no other
        code), it is counted on the bytes, without a Python object per result; anything
        else is parsed and judged by ``reply``."""
        data = raw.encode() if isinstance(raw, str) else raw
        if self.sent:
            frame = self.frames[0]
            head = b'{"type":"batch","context":"%d","results":[' % frame.number
            codes = data.count(b'"errorCode":')
            if data.startswith(head) and codes == frame.count == data.count(b'"errorCode":0'):
                self.stored += codes
                self.duplicates += data.count(b'"duplicate":true')
                self.frames.popleft()
                self.sent -= 1
                return Verdict.STORED, frame.size
        return self.reply(orjson.loads(data))

    def reply(self, body: dict[str, Any]) -> tuple[Verdict, int]:
        """Take the reply to the oldest frame sent; returns the verdict and the bytes freed."""
        if not self.sent:
            raise ReplyError(f"a reply came with no frame outstanding: {str(body)[:200]}")
        frame = self.frames[0]
        results = body.get("results")
        if body.get("type") != "batch" or not isinstance(results, list):
            raise ReplyError(f"the gateway refused a whole frame: {body.get('errorMsg') or str(body)[:300]}")
        if body.get("context") != str(frame.number) or len(results) != frame.count:
            if self._later_frame_failed_retriably(body.get("context"), results):
                return Verdict.RESEND, 0
            raise ReplyError(f"reply to frame {body.get('context')!r}, expected {frame.number}")
        for index, result in enumerate(results):
            code = result.get("errorCode", 0)
            if code == 0:
                self.stored += 1
                self.duplicates += 1 if result.get("duplicate") else 0
            elif code == 1:  # retriable: keep it and what follows; the session ends
                rest = orjson.loads(frame.data)["messages"][index:]
                frame.data, frame.count = encode_frame(frame.number, orjson.dumps(rest)), len(rest)
                return Verdict.RESEND, 0
            else:
                raise ReplyError(f"a message was refused: {result.get('errorMsg')}")
        self.frames.popleft()
        self.sent -= 1
        return Verdict.STORED, frame.size

    def _later_frame_failed_retriably(self, context: object, results: list[Any]) -> bool:
        """Whether the reply answers a later frame sent on this session, with a retriable
        failure and no refusal: the gateway answers a message it refuses at once (a full
        queue), ahead of the earlier frames still being stored, and ends the session. The
        whole window then goes out again; producer dedup answers what was stored."""
        numbers = {str(f.number) for f in list(self.frames)[1 : self.sent]}
        codes = [r.get("errorCode", 0) if isinstance(r, dict) else None for r in results]
        return context in numbers and 1 in codes and all(code in (0, 1) for code in codes)
