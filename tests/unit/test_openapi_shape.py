"""The OpenAPI document's shape: ids, tags, one error model, no 422, documented bodies.

Generated clients depend on these: an operation id becomes a function name,
a tag a sub-package, and an undeclared or differently shaped error body makes
the client raise while parsing.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from gateway.api.openapi import TAGS
from gateway.api.openapi_spec import spec

pytestmark = pytest.mark.unit

ERROR_REF = "#/components/schemas/ErrorBody"
AUTO_ID = re.compile(r"_(get|post|put|delete|patch|head|options)$|__")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return spec()


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op) for path, methods in document["paths"].items() for method, op in methods.items()
    ]


def test_operation_ids_are_unique_function_names(document: dict[str, Any]) -> None:
    ids = [op["operationId"] for _, _, op in operations(document)]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    assert not duplicates
    assert len(ids) > 40
    auto = [i for i in ids if AUTO_ID.search(i)]
    assert not auto, f"auto-generated looking operation ids: {auto}"
    for name in ("produce", "produce_partition", "fetch", "ack", "nack", "lookup", "lookup_bundle", "health"):
        assert name in ids


def test_tags_are_the_declared_ones_with_descriptions(document: dict[str, Any]) -> None:
    declared = {t["name"] for t in document["tags"]}
    assert declared == {t["name"] for t in TAGS}
    assert all(t["description"] for t in document["tags"])
    by_id = {op["operationId"]: op for _, _, op in operations(document)}
    assert by_id["produce"]["tags"] == ["produce"]
    assert by_id["fetch"]["tags"] == ["consume"]
    assert by_id["lookup"]["tags"] == ["lookup"]
    assert by_id["health"]["tags"] == ["health"]
    untagged = [(m, p) for m, p, op in operations(document) if not op.get("tags")]
    assert not untagged, untagged
    used = {tag for _, _, op in operations(document) for tag in op.get("tags", [])}
    assert used <= declared, used - declared


def test_no_422_and_every_error_is_error_body(document: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for method, path, op in operations(document):
        responses = op["responses"]
        assert "422" not in responses, (method, path)
        for status, response in responses.items():
            if int(status) >= 400:
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": ERROR_REF}, (method, path, status, schema)
    error = document["components"]["schemas"]["ErrorBody"]
    assert set(error["required"]) == {"reason", "code"}


def test_operations_with_parameters_declare_400(document: dict[str, Any]) -> None:
    for method, path, op in operations(document):
        if op.get("parameters") or op.get("requestBody"):
            assert "400" in op["responses"] or "412" in op["responses"], (method, path)


def test_produce_declares_json_and_binary_bodies(document: dict[str, Any]) -> None:
    op = document["paths"]["/topics/{domain}/{tenant}/{namespace}/{topic}"]["post"]
    content = op["requestBody"]["content"]
    assert content["application/octet-stream"]["schema"] == {"type": "string", "format": "binary"}
    assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/ProducerMessages"}
    headers = {p["name"] for p in op["parameters"] if p["in"] == "header"}
    assert headers == {"X-Pulsar-partition-key", "X-Pulsar-context"}
    assert "X-Pulsar-sequence-id" in op["requestBody"]["description"]
    ok = op["responses"]["200"]["content"]["application/json"]["schema"]
    refs = {s["$ref"].rsplit("/", 1)[1] for s in ok["anyOf"]}
    assert refs == {"ProducerAcks", "ProducerAck"}


def test_base64_fields_say_so(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert schemas["Base64Message"]["properties"]["payload"]["contentEncoding"] == "base64"
    assert "contentEncoding" not in schemas["TextMessage"]["properties"]["payload"]
    message = schemas["ConsumerMessage"]["properties"]
    assert message["payload"]["contentEncoding"] == "base64"
    assert message["messageId"]["contentEncoding"] == "base64"
    for path in ("/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}/ack",):
        body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/AckRequest"}
    fetch = document["paths"]["/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}"]["get"]
    ok = fetch["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/FetchResponse"}


def test_websocket_routes_and_internal_pages_are_not_in_the_spec(document: dict[str, Any]) -> None:
    paths = set(document["paths"])
    assert not [p for p in paths if p.startswith("/ws/")]
    assert "/metrics" not in paths and "/asyncapi.json" not in paths
