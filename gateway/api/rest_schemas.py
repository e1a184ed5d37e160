"""The REST producer's schemas: ``keySchema``, ``valueSchema`` and ``schemaVersion``.

Owns: ``apply_schemas`` - it resolves the schema a ``ProducerMessages`` body
names, encodes every payload with it and stamps the version on each message,
before anything is stored. Rules (docs/decisions/0010-schema-registry.md,
Pulsar's REST API):
- ``schemaVersion`` (>= 0) wins: that registered version of the topic's schema
  (404 if there is none such); else ``valueSchema`` (a JSON ``SchemaInfo``) is
  looked up in the topic's lineage or added as its next version - when the
  namespace's strategy accepts it and ``isAllowAutoUpdateSchema`` is on (409
  otherwise); without either, payloads are stored as given, with no version
  (as WebSocket producers publish);
- a text payload is encoded by the schema (JSON/AVRO from JSON text, the
  primitives from their text); a base64 payload must already be the schema's
  bytes; a payload that does not fit is 400 naming it, e.g.
  ``messages[2].payload: field `year` of PC: expected an int, got the string "x"``
  - and then no
  message of the request is stored;
- ``keySchema`` checks each message's ``key`` text against it (400 naming
  ``messages[i].key``); keys are stored as the text given (Folio routes and
  hashes keys as text), and the key schema is not registered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.meta.schema_types import (
    SchemaInfo,
    check_bytes,
    encode_text,
    parse_rest_schema,
)
from gateway.names import TopicName
from gateway.protocol.errors import PayloadTooLarge
from gateway.protocol.rest import ProducerMessages

if TYPE_CHECKING:
    from gateway.process import Gateway


async def apply_schemas(gateway: Gateway, topic: TopicName, body: ProducerMessages, max_payload: int) -> int:
    """Encode ``body``'s payloads with its schema and stamp the version; returns the
    version (0 when the body names no schema, as Pulsar's reply says)."""
    key_schema = parse_rest_schema(body.key_schema, "keySchema") if body.key_schema else None
    if key_schema is not None:
        for index, request in enumerate(body.messages):
            if request.key is not None:
                encode_text(key_schema, request.key, f"messages[{index}].key")
    if body.schema_version is not None:
        stored = await gateway.schemas.version(topic, body.schema_version)
        schema, version = stored.info, stored.version
    elif body.value_schema:
        schema = parse_rest_schema(body.value_schema, "valueSchema")
        policies = await gateway.namespaces.policies(topic.namespace_name)
        version = await gateway.schemas.add(
            topic,
            schema,
            policies.schema_compatibility_strategy,
            gateway.clock.now_ms(),
            may_add=policies.is_allow_auto_update_schema,
        )
    else:
        return 0
    _encode_all(schema, version, body, max_payload)
    return version


def _encode_all(schema: SchemaInfo, version: int, body: ProducerMessages, max_payload: int) -> None:
    encoded: list[bytes] = []
    for index, (request, text) in enumerate(zip(body.messages, body.texts, strict=True)):
        where = f"messages[{index}].payload"
        if text:
            payload = encode_text(schema, request.payload.decode("utf-8"), where)
        else:
            check_bytes(schema, request.payload, where)
            payload = request.payload
        if len(payload) > max_payload:
            raise PayloadTooLarge(len(payload), max_payload)
        encoded.append(payload)
    for request, payload in zip(body.messages, encoded, strict=True):  # all valid: now change them
        request.payload = payload
        request.schema_version = version
