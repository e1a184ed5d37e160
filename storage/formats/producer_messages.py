"""The JSON body of Folio's REST producer API (``POST /topics/...``), as its senders build it (pure).

Owns: ``message`` (one element of ``messages``) and ``body`` (the whole
``ProducerMessages`` object). Rules (docs/compatibility.md §2):
- a payload always travels base64 (``payloadEncoding: base64``), so any bytes
  pass unchanged;
- a field is sent only when it says something: ``key`` and ``sequenceId`` when
  given, ``properties`` when not empty, ``eventTime``/``deliverAt`` when set
  (not 0), ``schemaVersion`` when given - the gateway reads a missing field as
  its default;
- the gateway parses and checks the body in ``gateway.protocol.rest``.
Why here: its senders are a gateway forwarding a publish to a peer and the
Spark connector writing rows, and Spark never imports the gateway; both sit
above ``storage``, and this package already holds the formats the gateway and
Spark share (nothing here does I/O).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pybase64 import b64encode_as_string


def message(
    payload: bytes,
    *,
    key: str | None = None,
    properties: Mapping[str, str] | None = None,
    sequence_id: int | None = None,
    event_time_ms: int | None = None,
    deliver_at_ms: int | None = None,
    schema_version: int | None = None,
) -> dict[str, Any]:
    """One message of the body's ``messages`` array."""
    out: dict[str, Any] = {"payload": b64encode_as_string(payload), "payloadEncoding": "base64"}
    if properties:
        out["properties"] = dict(properties)
    if key is not None:
        out["key"] = key
    if sequence_id is not None:
        out["sequenceId"] = sequence_id
    if event_time_ms:
        out["eventTime"] = event_time_ms
    if deliver_at_ms:
        out["deliverAt"] = deliver_at_ms
    if schema_version is not None:  # the payload is already the schema's bytes
        out["schemaVersion"] = schema_version
    return out


def body(
    producer_name: str, messages: list[dict[str, Any]], schema_version: int | None = None
) -> dict[str, Any]:
    """The whole body: the producer's name, its messages and, when given, the schema
    version the payloads were encoded with."""
    out: dict[str, Any] = {"producerName": producer_name, "messages": messages}
    if schema_version is not None:
        out["schemaVersion"] = schema_version
    return out
