"""Publishing test data through a gateway's REST batch publish (sync, httpx).

Owns: ``publish`` (messages with keys, properties and event times, in requests
of up to 500) and ``create_partitioned``. Returns what was published, so tests
compare what Spark reads with what the gateways acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
from pybase64 import b64encode_as_string


@dataclass(frozen=True)
class Sent:
    topic: str
    key: str | None
    value: bytes
    properties: dict[str, str] = field(default_factory=dict)
    event_time_ms: int | None = None
    message_id: str = ""


def path(topic: str) -> str:
    return topic.replace("://", "/", 1)


def create_partitioned(base_url: str, topic: str, partitions: int) -> None:
    reply = httpx.put(f"{base_url}/admin/v2/{path(topic)}/partitions", json=partitions, timeout=30)
    assert reply.status_code in (200, 204), reply.text


def publish(
    base_url: str, topic: str, messages: list[Sent], producer: str = "test", per_request: int = 500
) -> list[Sent]:
    done: list[Sent] = []
    with httpx.Client(timeout=60) as http:
        for low in range(0, len(messages), per_request):
            chunk = messages[low : low + per_request]
            body = {
                "producerName": producer,
                "messages": [
                    {
                        "payload": b64encode_as_string(m.value),
                        "payloadEncoding": "base64",
                        **({"key": m.key} if m.key is not None else {}),
                        **({"properties": m.properties} if m.properties else {}),
                        **({"eventTime": m.event_time_ms} if m.event_time_ms is not None else {}),
                    }
                    for m in chunk
                ],
            }
            reply = http.post(f"{base_url}/topics/{path(topic)}", json=body)
            assert reply.status_code == 200, reply.text
            results = reply.json()["messagePublishResults"]
            for m, r in zip(chunk, results, strict=True):
                assert r["errorCode"] == 0, r
                done.append(Sent(m.topic, m.key, m.value, m.properties, m.event_time_ms, r["messageId"]))
    return done


def create_namespace(base_url: str, namespace: str, dedup: bool) -> None:
    """``tenant/ns`` with deduplication on or off."""
    reply = httpx.put(f"{base_url}/admin/v2/namespaces/{namespace}", timeout=30)
    assert reply.status_code in (200, 204, 409), reply.text
    reply = httpx.post(f"{base_url}/admin/v2/namespaces/{namespace}/deduplication", json=dedup, timeout=30)
    assert reply.status_code == 204, reply.text
