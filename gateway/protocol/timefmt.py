"""Timestamp strings of the WebSocket API (pure).

Owns: ``format_iso`` (epoch ms -> text) and ``parse_iso`` (text -> epoch ms).
Rule (docs/compatibility.md §1.9): Java's ``ISO_OFFSET_DATE_TIME``. Folio always
formats in UTC (upstream uses the server's default zone; any zone is valid
ISO-8601, UTC makes output independent of the host): ``2022-09-07T01:08:23.26Z``,
seconds always printed, the fraction with as few digits as needed and omitted
when zero. Parsing accepts what Java's formatter accepts: seconds and fraction
(1..9 digits, truncated to ms) optional, ``T``/``Z`` in either case, an offset
``Z``, ``±hh:mm`` or ``±hh:mm:ss`` up to 18 hours - and requires the offset.
Years are limited to 0001..9999 (``EPOCH_MS_MIN``..``EPOCH_MS_MAX``).
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta

from gateway.protocol.errors import WS_PAYLOAD_ENCODING_ERROR, FrameError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_MS_MIN = -62135596800000  # 0001-01-01T00:00:00Z
EPOCH_MS_MAX = 253402300799999  # 9999-12-31T23:59:59.999Z
ISO_CHARS_MAX = 64
_OFFSET_SECONDS_MAX = 18 * 3600

_ISO = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2})"
    r"(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?)"
)


@functools.lru_cache(maxsize=4096)  # messages of one entry share their publish time
def format_iso(ms: int) -> str:
    """``ms`` since the epoch as ISO-8601 in UTC, e.g. ``2022-09-07T01:08:23.26Z``."""
    if not EPOCH_MS_MIN <= ms <= EPOCH_MS_MAX:
        raise ValueError(f"epoch ms {ms} is outside years 0001..9999")
    seconds, millis = divmod(ms, 1000)
    moment = _EPOCH + timedelta(seconds=seconds)
    text = (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )
    if millis:
        text += "." + f"{millis:03d}".rstrip("0")
    return text + "Z"


def parse_iso(text: str) -> int:
    """Epoch ms of an ISO-8601 date-time with offset; ``FrameError`` (ws_code 7) if invalid."""
    match = _ISO.fullmatch(text) if len(text) <= ISO_CHARS_MAX else None
    if match is None:
        raise _bad(text, "expected ISO-8601 date-time with offset, e.g. 2022-09-07T01:08:23.26Z")
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m, off_s = match.groups()
    try:
        local = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0))
    except ValueError as exc:
        raise _bad(text, str(exc)) from exc
    offset = 0
    if not zulu:
        off_hours, off_minutes, off_seconds = int(off_h), int(off_m), int(off_s or 0)
        if off_hours > 18 or off_minutes > 59 or off_seconds > 59:
            raise _bad(text, "offset out of range")
        offset = off_hours * 3600 + off_minutes * 60 + off_seconds
        if offset > _OFFSET_SECONDS_MAX:
            raise _bad(text, "offset out of range")
        if sign == "-":
            offset = -offset
    local_seconds = (local - _EPOCH.replace(tzinfo=None)) // timedelta(seconds=1)
    millis = int((fraction or "0").ljust(9, "0")[:3])
    ms = (local_seconds - offset) * 1000 + millis
    if not EPOCH_MS_MIN <= ms <= EPOCH_MS_MAX:
        raise _bad(text, "outside years 0001..9999")
    return ms


def _bad(text: str, why: str) -> FrameError:
    return FrameError(WS_PAYLOAD_ENCODING_ERROR, f"Invalid date-time {text[:ISO_CHARS_MAX]!r}: {why}")
