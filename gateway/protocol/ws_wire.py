"""WebSocket framing (RFC 6455 §5.2) of the data frames of an open session (pure).

Owns: reading a client's complete, unfragmented data frames out of the bytes a
session received (``read_data_frames``), and the bytes of the server's text
frames (``text_frames``) - the per-frame hot path below the websockets library.
Rules: only what needs no judgement is read here: a masked text or binary
frame with FIN set, no RSV bit and a length up to ``max_size``. Any other
frame (a control frame, a fragment) is left whole for the websockets library
(``Stop.OTHER`` with its end), and a header it must judge (an RSV bit, no
mask, an unknown opcode, a length past ``max_size``) ends the reading here
(``Stop.INVALID``): the library then fails the connection with its own close
code, exactly as when it read every frame. A server frame is what the library
writes (FIN, opcode 1, no mask, the shortest length form), byte for byte.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from websockets.frames import apply_mask

OP_TEXT = 0x1
OP_BINARY = 0x2
_FIN_TEXT = 0x81
_FIN_BINARY = 0x82
_SHORT_HEADERS = [bytes((_FIN_TEXT, n)) for n in range(126)]  # a server text frame under 126 bytes
_MEDIUM = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")


class Stop(enum.Enum):
    """Why ``read_data_frames`` stopped at ``Scan.end``."""

    MORE = "more"  # the frame there is not complete yet (``need`` bytes from ``end``, at least)
    OTHER = "other"  # a complete frame for the library there, ending at ``frame_end``
    INVALID = "invalid"  # a header for the library to judge: it takes everything from ``end``


class Scan(NamedTuple):
    frames: list[tuple[int, bytes]]  # (opcode, unmasked payload) of each data frame read, in order
    end: int  # offset of the first byte not read
    stop: Stop
    frame_end: int  # ``Stop.OTHER``: end of that frame; ``Stop.MORE``: bytes it needs in all


def read_data_frames(data: bytes | bytearray, pos: int, max_size: int, data_ok: bool = True) -> Scan:
    """The lone data frames from ``pos`` on (none when ``data_ok`` is False: a fragmented
    message is under way, every frame is the library's) (pure)."""
    frames: list[tuple[int, bytes]] = []
    size = len(data)
    view = memoryview(data)
    while True:
        if size - pos < 2:
            return Scan(frames, pos, Stop.MORE, 2)
        head1 = data[pos]
        head2 = data[pos + 1]
        opcode = head1 & 0x0F
        if head1 & 0x70 or not head2 & 0x80 or opcode not in (0, 1, 2, 8, 9, 10):
            return Scan(frames, pos, Stop.INVALID, pos)
        length = head2 & 0x7F
        start = pos + 6
        if length == 126:
            if size - pos < 4:
                return Scan(frames, pos, Stop.MORE, 4)
            length = (data[pos + 2] << 8) | data[pos + 3]
            start = pos + 8
        elif length == 127:
            if size - pos < 10:
                return Scan(frames, pos, Stop.MORE, 10)
            length = int.from_bytes(view[pos + 2 : pos + 10], "big")
            start = pos + 14
        if length > max_size:
            return Scan(frames, pos, Stop.INVALID, pos)
        end = start + length
        if end > size:
            return Scan(frames, pos, Stop.MORE, end - pos)
        if not data_ok or head1 not in (_FIN_TEXT, _FIN_BINARY):
            return Scan(frames, pos, Stop.OTHER, end)
        frames.append((opcode, apply_mask(view[start:end], data[start - 4 : start])))
        pos = end


def text_frames(payloads: list[bytes]) -> bytes:
    """The bytes of one server text frame per payload (UTF-8), in order (pure)."""
    parts: list[bytes] = []
    append = parts.append
    for payload in payloads:
        n = len(payload)
        if n < 126:
            append(_SHORT_HEADERS[n])
        elif n < 65536:
            append(_MEDIUM.pack(_FIN_TEXT, 126, n))
        else:
            append(_LONG.pack(_FIN_TEXT, 127, n))
        append(payload)
    return b"".join(parts)
