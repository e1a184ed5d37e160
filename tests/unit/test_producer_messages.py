"""The REST producer body as its senders build it (storage/formats/producer_messages.py)
is what the gateway's parser (gateway/protocol/rest.py) reads back, field for field."""

from __future__ import annotations

import orjson
import pytest

from gateway.protocol.rest import parse_producer_messages
from storage.formats import producer_messages

pytestmark = pytest.mark.unit

NOW_MS = 1_700_000_000_000


def test_every_field_goes_through_the_gateway_parser() -> None:
    body = producer_messages.body(
        "spark-7",
        [
            producer_messages.message(
                b"\x00\xffbytes",
                key="k",
                properties={"a": "1"},
                sequence_id=42,
                event_time_ms=NOW_MS - 5,
                deliver_at_ms=NOW_MS + 60_000,
            ),
            producer_messages.message(b""),
        ],
        schema_version=3,
    )
    parsed = parse_producer_messages(orjson.dumps(body), NOW_MS, 1024)
    assert parsed.producer_name == "spark-7" and parsed.schema_version == 3
    first, second = parsed.messages
    assert first.payload == b"\x00\xffbytes" and first.key == "k" and first.properties == {"a": "1"}
    assert (first.sequence_id, first.event_time_ms, first.deliver_at_ms) == (42, NOW_MS - 5, NOW_MS + 60_000)
    assert second.payload == b"" and second.key is None and second.properties == {}
    assert (second.sequence_id, second.event_time_ms, second.deliver_at_ms) == (None, 0, 0)


def test_unset_fields_are_left_out() -> None:
    assert producer_messages.message(b"x", properties={}, event_time_ms=0) == {
        "payload": "eA==",
        "payloadEncoding": "base64",
    }
    assert producer_messages.body("p", []) == {"producerName": "p", "messages": []}
