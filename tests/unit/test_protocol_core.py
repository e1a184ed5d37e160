"""The protocol package's error tree follows docs/architecture.md §11: stable codes,
WebSocketError codes of docs/compatibility.md §1.3 (its purity is checked in test_pure_cores.py)."""

from __future__ import annotations

import pytest

from gateway.errors import GatewayError
from gateway.protocol.errors import (
    INVALID_PARAMS_PREFIX,
    WS_ERROR_DESCRIPTIONS,
    BadRequest,
    FrameError,
    InvalidParams,
    PayloadTooLarge,
    ProtocolError,
    ws_close_reason,
)
from gateway.protocol.json_fields import (
    WHOLE_FLOAT_MAX,
    as_int,
    base64_decoded_size,
    decode_base64_payload,
    get_int,
    get_str,
    is_text,
)
from gateway.protocol.ws_frames import parse_publish_object

pytestmark = pytest.mark.unit


def test_error_tree() -> None:
    for cls in (InvalidParams, FrameError, PayloadTooLarge, BadRequest):
        assert issubclass(cls, ProtocolError)
        assert issubclass(cls, GatewayError)
        assert cls.retriable is False
    codes = {ProtocolError.code, InvalidParams.code, FrameError.code, PayloadTooLarge.code, BadRequest.code}
    assert len(codes) == 5
    assert InvalidParams.code == "invalid_params"
    assert PayloadTooLarge.code == "payload_too_large"


def test_error_fields() -> None:
    exc = InvalidParams("Invalid subscriptionType Foo")
    assert (exc.message, exc.detail) == (
        "Invalid query params: Invalid subscriptionType Foo",
        "Invalid subscriptionType Foo",
    )
    assert INVALID_PARAMS_PREFIX == "Invalid query params: "
    frame = FrameError(7, "bad", "ctx")
    assert (frame.ws_code, frame.message, frame.context, str(frame)) == (7, "bad", "ctx", "bad")
    assert ProtocolError("x").ws_code == 8
    assert BadRequest("x").ws_code == 8
    with pytest.raises(AssertionError):
        FrameError(0, "no such code")


def test_ws_error_table() -> None:
    assert sorted(WS_ERROR_DESCRIPTIONS) == list(range(1, 9))
    assert WS_ERROR_DESCRIPTIONS[3] == "Failed to de-serialize from JSON"
    assert WS_ERROR_DESCRIPTIONS[7] == "Invalid payload encoding"
    assert ws_close_reason(3) == "Failed to de-serialize from JSON"
    assert ws_close_reason(2, "ConsumerBusy") == "Failed to subscribe: ConsumerBusy"


def test_is_text() -> None:
    assert is_text("plain") and is_text("héllo ✓")
    assert not is_text("a\ud800b")


def test_surrogates_from_python_callers_are_refused() -> None:
    """orjson already refuses lone surrogates; a dict built in Python is checked too."""
    with pytest.raises(FrameError) as info:
        get_str({"key": "\udc00"}, "key", "c")
    assert (info.value.ws_code, info.value.context) == (3, "c")
    with pytest.raises(FrameError, match="context must be valid Unicode"):
        parse_publish_object({"payload": "", "context": "\ud800"}, 0, 10)
    with pytest.raises(FrameError, match="properties contains invalid Unicode"):
        parse_publish_object({"payload": "", "properties": {"\ud800": "v"}}, 0, 10)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3178, 3178),
        (3178.0, 3178),
        (-2.0, -2),
        (float(WHOLE_FLOAT_MAX), WHOLE_FLOAT_MAX),
        (-float(WHOLE_FLOAT_MAX), -WHOLE_FLOAT_MAX),
        (float(WHOLE_FLOAT_MAX) * 2, None),  # beyond 2^53 a float no longer spells one integer
        (3178.5, None),
        (True, None),
        ("3178", None),
        (None, None),
    ],
)
def test_integers_are_json_integers_or_whole_floats(value: object, expected: int | None) -> None:
    result = as_int(value)
    assert result == expected and (result is None or type(result) is int)


def test_get_int_reads_whole_floats_and_keeps_its_bounds() -> None:
    assert get_int({"n": 7.0}, "n", 0, 10) == 7
    with pytest.raises(FrameError, match="n 11 is outside"):
        get_int({"n": 11.0}, "n", 0, 10)
    with pytest.raises(FrameError, match="n must be an integer, got a number") as info:
        get_int({"n": 0.25}, "n", 0, 10, "ctx")
    assert (info.value.ws_code, info.value.context) == (3, "ctx")
    published = parse_publish_object({"payload": "", "deliverAt": 5000.0, "sequenceId": 9.0}, 0, 10)
    assert (published.deliver_at_ms, published.sequence_id) == (5000, 9)


@pytest.mark.parametrize(
    ("text", "size"), [("", 0), ("QQ", 1), ("QQ==", 1), ("QUI", 2), ("QUJD", 3), ("QUJDRA", 4)]
)
def test_base64_sizes(text: str, size: int) -> None:
    assert base64_decoded_size(text) == size
    assert len(decode_base64_payload(text, size)) == size
    with pytest.raises(PayloadTooLarge):
        decode_base64_payload(text + "QUJD", size)
