"""The AsyncAPI document: committed = generated, valid schemas, and agreement with the real code.

Frames the real encoders of ``gateway.protocol.ws_frames`` build validate
against their schemas; frames the real parsers (``parse_publish``,
``parse_command``) accept validate too, and frames they refuse are refused by
the schemas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from jsonschema import Draft7Validator

from gateway.api.asyncapi import MESSAGES, document, frame_schema, render
from gateway.api.asyncapi_frames import FRAME_SCHEMAS
from gateway.broker.dispatch.base import HashRange
from gateway.protocol.errors import FrameError, ProtocolError
from gateway.protocol.ws_commands import (
    parse_command,
)
from gateway.protocol.ws_frames import (
    DELIVER_AFTER_MAX_MS,
    active_notice,
    encode_frame,
    end_of_topic_reply,
    message_frame,
    messages_frame,
    parse_publish,
    publish_batch_reply,
    publish_error,
    publish_error_dict,
    publish_error_for,
    publish_ok,
    publish_ok_dict,
    ranges_notice,
)
from storage.formats.message_id import MessageId

pytestmark = pytest.mark.unit

COMMITTED = Path(__file__).resolve().parents[2] / "openapi" / "asyncapi.json"
NOW = 1_700_000_000_000
ID = MessageId(3, 0).to_base64()
BATCH_ID = MessageId(3, 0, 2, 1, 5).to_base64()


def valid(name: str, frame: Any) -> bool:
    return Draft7Validator(frame_schema(name)).is_valid(frame)


def test_committed_document_matches_the_code() -> None:
    assert COMMITTED.read_bytes() == render(), (
        "openapi/asyncapi.json drifted: regenerate it with "
        "`.venv/bin/python -m gateway.api.asyncapi > openapi/asyncapi.json`"
    )


@pytest.mark.parametrize("name", sorted(FRAME_SCHEMAS))
def test_every_frame_schema_is_valid_json_schema(name: str) -> None:
    Draft7Validator.check_schema(FRAME_SCHEMAS[name])
    Draft7Validator.check_schema(frame_schema(name))


def test_document_references_resolve() -> None:
    doc = document()
    assert doc["asyncapi"] == "3.0.0"
    addresses = {c["address"] for c in doc["channels"].values()}
    assert addresses == {
        "/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}",
        "/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}",
        "/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}",
        "/ws/v2/pingpong",
    }
    for name, message in MESSAGES.items():
        assert message["payload"]["$ref"].rsplit("/", 1)[1] in FRAME_SCHEMAS, name

    def resolve(pointer: str) -> Any:
        node: Any = doc
        for part in pointer.removeprefix("#/").split("/"):
            node = node[part]
        return node

    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    assert len(refs) > 50
    for pointer in refs:
        assert resolve(pointer) is not None, pointer
    for operation in doc["operations"].values():
        channel = resolve(operation["channel"]["$ref"])
        for message in operation["messages"]:
            assert resolve(message["$ref"]) in channel["messages"].values()
    assert "4503" in doc["info"]["description"] and "4003" in doc["info"]["description"]


# ------------------------------------------------------------------ gateway -> client frames


@pytest.mark.parametrize(
    ("name", "frame"),
    [
        ("PublishReply", publish_ok(ID, "ctx-1")),
        ("PublishReply", publish_ok(ID)),
        ("PublishReply", publish_ok(BATCH_ID, "c", duplicate=True)),
        ("PublishReply", publish_error(3, "Unexpected character")),
        ("PublishReply", publish_error_for(FrameError(7, "Invalid Base64 message-payload", "c7"))),
        (
            "PublishBatchReply",
            publish_batch_reply([publish_ok_dict(ID), publish_error_dict(8, "send failed")], "batch-1"),
        ),
        ("PublishBatchReply", publish_batch_reply([publish_ok_dict(BATCH_ID)])),
        ("MessagesBatch", messages_frame([encode_frame(message_frame(ID, b"\x00\xff", {"a": "b"}, NOW, 0))])),
        ("EndOfTopicReply", end_of_topic_reply(False)),
        ("ActiveNotice", active_notice(True)),
        ("RangesNotice", ranges_notice([HashRange(0, 16383), HashRange(32768, 65535)])),
    ],
)
def test_encoded_frames_validate(name: str, frame: bytes) -> None:
    obj = orjson.loads(frame)
    errors = [e.message for e in Draft7Validator(frame_schema(name)).iter_errors(obj)]
    assert not errors, (obj, errors)


@pytest.mark.parametrize(
    "frame",
    [
        message_frame(ID, b"hello", {}, NOW, 0),
        message_frame(BATCH_ID, b"", {"k": "v"}, NOW + 1, 3, event_time_ms=NOW - 5, key="user-1"),
        message_frame(ID, bytes(range(256)), {}, 0, 1, event_time_ms=123),
    ],
)
def test_message_frames_validate(frame: dict[str, Any]) -> None:
    assert valid("ConsumerMessage", orjson.loads(orjson.dumps(frame)))


def test_schemas_refuse_what_the_gateway_never_sends() -> None:
    assert not valid("PublishReply", {"result": "ok", "errorCode": 0, "schemaVersion": 0})  # no id
    assert not valid(
        "PublishReply", {"result": "send-error:9", "errorMsg": "x", "errorCode": 0, "schemaVersion": 0}
    )
    assert not valid("ConsumerMessage", {"messageId": ID, "payload": "x", "properties": {}})
    assert not valid("MessagesBatch", {"type": "messages", "messages": []})


# ------------------------------------------------------------------ client -> gateway frames


def _accepted_by_publish_parser(frame: Any) -> bool:
    try:
        parse_publish(orjson.dumps(frame), NOW, 1 << 20)
    except ProtocolError:
        return False
    return True


PUBLISH_FRAMES: list[Any] = [
    {"payload": "aGVsbG8="},
    {"payload": "aGVsbG8", "context": "1", "key": "k", "properties": {"a": "b"}},
    {"payload": "", "eventTime": "2022-09-07T01:08:23.26Z", "deliverAfterMs": 1000, "sequenceId": 7},
    {"payload": "AA==", "deliverAt": NOW + 5, "unknownField": [1, 2]},
    {"payload": "AA==", "deliverAfterMs": DELIVER_AFTER_MAX_MS, "type": "anythingButBatch"},
    {"type": "batch", "context": "b", "messages": [{"payload": "AA=="}, {"payload": "AQ==", "key": "x"}]},
    # refused by the gateway
    {},
    {"context": "no payload"},
    {"payload": 5},
    {"payload": None},
    {"payload": "abc=d"},
    {"payload": "a"},
    {"payload": "AA==", "properties": {"a": 1}},
    {"payload": "AA==", "properties": []},
    {"payload": "AA==", "eventTime": 1700000000000},
    {"payload": "AA==", "eventTime": "yesterday"},
    {"payload": "AA==", "eventTime": "1969-12-31T23:59:59Z"},
    {"payload": "AA==", "context": 5},
    {"payload": "AA==", "key": 5},
    {"payload": "AA==", "sequenceId": -1},
    {"payload": "AA==", "deliverAt": "soon"},
    {"payload": "AA==", "deliverAt": 1.5},
    {"payload": "AA==", "deliverAfterMs": DELIVER_AFTER_MAX_MS + 1},
    {"type": "batch", "messages": []},
    {"type": "batch"},
    {"type": "batch", "messages": [{"payload": "AA=="}, {"payload": 1}]},
    {"type": "batch", "messages": [{"payload": "AA=="}, "x"]},
]


@pytest.mark.parametrize("frame", PUBLISH_FRAMES)
def test_publish_schema_agrees_with_the_parser(frame: Any) -> None:
    name = "PublishBatch" if isinstance(frame, dict) and frame.get("type") == "batch" else "PublishRequest"
    assert valid(name, frame) == _accepted_by_publish_parser(frame), frame


def _accepted_by_command_parser(frame: Any) -> bool:
    try:
        parse_command(orjson.dumps(frame))
    except ProtocolError:
        return False
    return True


COMMAND_FRAMES: list[Any] = [
    {"messageId": ID},
    {"messageId": "3:0:-1"},
    {"messageId": ID, "type": "ack"},
    {"messageId": ID, "ackType": "cumulative"},
    {"type": "ack", "messageIds": [ID, BATCH_ID]},
    {"type": "ackCumulative", "messageId": ID},
    {"type": "negativeAcknowledge", "messageId": ID},
    {"type": "negativeAcknowledge", "messageIds": ["3:1", ID]},
    {"type": "permit", "permitMessages": 100},
    {"type": "unsubscribe"},
    {"type": "isEndOfTopic"},
    {"type": "seek", "messageId": "earliest"},
    {"type": "seek", "messageId": ID, "inclusive": False},
    {"type": "seek", "timestamp": NOW},
    {"type": "reconsumeLater", "messageId": ID, "delayMs": 5000},
    {"type": "somethingElse", "messageId": ID},
    # refused by the gateway
    {},
    {"type": "ack"},
    {"type": "ack", "messageIds": []},
    {"messageId": 5},
    {"messageId": "x:y"},
    {"messageId": ID, "messageIds": [ID]},
    {"messageId": ID, "ackType": "sideways"},
    {"type": 7, "messageId": ID},
    {"type": "ackCumulative"},
    {"type": "negativeAcknowledge"},
    {"type": "permit"},
    {"type": "permit", "permitMessages": -1},
    {"type": "permit", "permitMessages": "5"},
    {"type": "seek"},
    {"type": "seek", "messageId": ID, "timestamp": NOW},
    {"type": "seek", "timestamp": -5},
    {"type": "seek", "messageId": "earliest", "inclusive": "yes"},
    {"type": "reconsumeLater"},
    {"type": "reconsumeLater", "messageId": ID, "delayMs": -1},
]


@pytest.mark.parametrize("frame", COMMAND_FRAMES)
def test_command_schema_agrees_with_the_parser(frame: Any) -> None:
    assert valid("ConsumerCommand", frame) == _accepted_by_command_parser(frame), frame
