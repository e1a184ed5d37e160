"""Publish replies of the WebSocket producer session: a repeat that deduplication
dropped is answered as Pulsar answers it (``result`` ok, message id -1:-1, no
other field); ``"duplicate": true`` only for a producer that asked with
``markDuplicates=true``."""

from __future__ import annotations

import pytest

from gateway.api.ws_producer import publish_reply
from gateway.broker.publish_results import PublishResult
from gateway.protocol.ws_frames import PublishRequest
from storage.formats.message_id import NO_PARTITION, MessageId
from storage.formats.positions import NO_BATCH

pytestmark = pytest.mark.unit

PULSAR_KEYS = {"result", "messageId", "context", "errorCode", "schemaVersion"}


def test_duplicate_reply_is_exactly_pulsars_by_default() -> None:
    reply = publish_reply(PublishResult.duplicate_of(NO_PARTITION), PublishRequest(b"x", context="c"), False)
    assert set(reply) == PULSAR_KEYS
    assert reply == {
        "result": "ok",
        "messageId": reply["messageId"],
        "context": "c",
        "errorCode": 0,
        "schemaVersion": 0,
    }
    dup = MessageId.from_base64(str(reply["messageId"]))  # MessageIdData with ledger/entry 2^64-1
    assert (dup.ledger_id, dup.entry_id) == (-1, -1)


def test_duplicate_flag_only_when_asked_for() -> None:
    request = PublishRequest(b"x", context="c")
    marked = publish_reply(PublishResult.duplicate_of(NO_PARTITION), request, True)
    assert marked["duplicate"] is True
    assert set(marked) == PULSAR_KEYS | {"duplicate"}
    fresh = publish_reply(PublishResult(12, 3, NO_PARTITION, NO_BATCH, 0, "CAwQAw=="), request, True)
    assert "duplicate" not in fresh and fresh["messageId"] == "CAwQAw=="
