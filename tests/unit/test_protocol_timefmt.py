"""ISO-8601 timestamps of the WebSocket API (docs/compatibility.md §1.9): Java
ISO_OFFSET_DATE_TIME output in UTC, parsing with a required offset."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.errors import WS_PAYLOAD_ENCODING_ERROR, FrameError
from gateway.protocol.timefmt import EPOCH_MS_MAX, EPOCH_MS_MIN, format_iso, parse_iso

pytestmark = pytest.mark.unit

T_2022 = 1662512903260  # 2022-09-07T01:08:23.26Z


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (T_2022, "2022-09-07T01:08:23.26Z"),
        (1662512903000, "2022-09-07T01:08:23Z"),
        (1662512903001, "2022-09-07T01:08:23.001Z"),
        (1662512903100, "2022-09-07T01:08:23.1Z"),
        (1662512880000, "2022-09-07T01:08:00Z"),  # seconds always printed
        (0, "1970-01-01T00:00:00Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (EPOCH_MS_MIN, "0001-01-01T00:00:00Z"),
        (EPOCH_MS_MAX, "9999-12-31T23:59:59.999Z"),
    ],
)
def test_format_and_parse_examples(ms: int, text: str) -> None:
    assert format_iso(ms) == text
    assert parse_iso(text) == ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2021-10-29T16:01:38.967-07:00", 1635548498967),
        ("2021-10-29T23:01:38.967Z", 1635548498967),
        ("2021-10-30T01:01:38.967+02:00", 1635548498967),
        ("2021-10-29t23:01:38.967z", 1635548498967),  # Java ISO parsers are case-insensitive
        ("2021-10-29T23:01Z", 1635548460000),  # seconds optional
        ("2021-10-29T23:01:38.967999999Z", 1635548498967),  # nanos truncated to ms
        ("2021-10-29T23:01:38.9Z", 1635548498900),
        ("2021-10-29T23:01:38+00:00:30", 1635548468000),  # offset with seconds
        ("2021-10-29T23:01:38+18:00", 1635548498000 - 18 * 3600_000),
    ],
)
def test_parse_offsets(text: str, ms: int) -> None:
    assert parse_iso(text) == ms


@pytest.mark.parametrize(
    "text",
    [
        "2021-10-29T23:01:38.967",  # no offset
        "2021-10-29 23:01:38Z",  # space separator
        "2021-10-29",
        "2021-13-29T23:01:38Z",
        "2021-02-29T23:01:38Z",
        "2021-10-29T24:01:38Z",
        "2021-10-29T23:01:38.Z",
        "2021-10-29T23:01:38.1234567890Z",
        "2021-10-29T23:01:38+19:00",
        "2021-10-29T23:01:38+0200",
        "1635548498967",
        "",
        "x" * 1000,
        "\uff12\uff10\uff12\uff11-10-29T23:01:38Z",  # fullwidth (non-ASCII) digits
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(FrameError) as info:
        parse_iso(text)
    assert info.value.ws_code == WS_PAYLOAD_ENCODING_ERROR
    assert info.value.message.startswith("Invalid date-time")


def test_format_out_of_range_is_a_programmer_error() -> None:
    with pytest.raises(ValueError):
        format_iso(EPOCH_MS_MAX + 1)


@given(st.integers(EPOCH_MS_MIN, EPOCH_MS_MAX))
def test_round_trip(ms: int) -> None:
    text = format_iso(ms)
    assert parse_iso(text) == ms
    assert text.endswith("Z")
    fraction = text[19:-1]
    assert fraction == "" or (fraction.startswith(".") and not fraction.endswith("0"))


@given(st.integers(0, EPOCH_MS_MAX // 2), st.integers(-18 * 60, 18 * 60))
def test_offsets_shift_local_time(ms: int, offset_minutes: int) -> None:
    """The same instant written with any offset parses to the same ms."""
    local = format_iso(ms + offset_minutes * 60_000)[:-1]
    sign = "+" if offset_minutes >= 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    assert parse_iso(f"{local}{sign}{hours:02d}:{minutes:02d}") == ms
