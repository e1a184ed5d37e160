"""decode=true on a real cluster, in the shared ``local[2]`` session.

Schemas are registered through the admin API and messages published through
REST with ``valueSchema``; Spark reads the log straight from the storage nodes
and decodes each payload with the version it was written with: an AVRO topic
(two versions, the older messages lacking the newer field) and a partitioned
JSON topic (one message published without a schema decodes to null). A topic
without a schema, and two topics with different schemas, are errors naming them.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import orjson
import pytest
from publish import Sent, create_partitioned, publish

pytestmark = pytest.mark.component

NS = "public/default"
BASE = f"persistent://{NS}/"
USER = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    ],
}
USER_V2 = {
    **USER,
    "fields": [*USER["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
}


def _value_schema(kind: str, definition: dict[str, Any]) -> str:
    encoded = base64.b64encode(orjson.dumps(definition)).decode()
    return orjson.dumps({"name": "", "schema": encoded, "type": kind, "properties": {}}).decode()


def _publish_with_schema(
    http: httpx.Client, url: str, name: str, kind: str, schema: Any, users: list[Any]
) -> None:
    body = {
        "valueSchema": _value_schema(kind, schema),
        "messages": [{"payload": orjson.dumps(u).decode()} for u in users],
    }
    reply = http.post(f"{url}/topics/persistent/{NS}/{name}", json=body)
    assert reply.status_code == 200, reply.text


def _register(http: httpx.Client, url: str, name: str, kind: str, schema: Any) -> None:
    body = {"type": kind, "schema": orjson.dumps(schema).decode(), "properties": {}}
    reply = http.post(f"{url}/admin/v2/schemas/{NS}/{name}/schema", json=body)
    assert reply.status_code == 200, reply.text


def _decoded(spark, options, topic: str) -> list[Any]:
    df = spark.read.format("folio").options(**options, topic=topic, decode="true").load()
    assert df.schema["decoded"].dataType.simpleString() == (
        "struct<name:string,age:int,tags:array<string>,email:string>"
    )
    return df.select("schema_version", "decoded.*").collect()


def test_decode_true_adds_the_typed_payload(folio, spark, source_options):
    url = folio.urls[0]
    old = [{"name": f"u{i}", "age": i, "tags": ["t"] * (i % 3)} for i in range(5)]
    new = [{"name": f"v{i}", "age": 100 + i, "tags": [], "email": f"v{i}@x"} for i in range(6)]
    with httpx.Client(timeout=30) as http:
        assert http.put(f"{url}/admin/v2/persistent/{NS}/decode-avro").status_code == 204
        _register(http, url, "decode-avro", "AVRO", USER)
        _publish_with_schema(http, url, "decode-avro", "AVRO", USER, old)
        _register(http, folio.urls[1], "decode-avro", "AVRO", USER_V2)
        _publish_with_schema(http, url, "decode-avro", "AVRO", USER_V2, new)

        create_partitioned(url, BASE + "decode-json", 4)
        _register(http, url, "decode-json", "JSON", USER_V2)
        _publish_with_schema(http, url, "decode-json", "JSON", USER_V2, new)
    publish(url, BASE + "decode-json", [Sent(BASE + "decode-json", None, b"not json")])

    rows = _decoded(spark, source_options, BASE + "decode-avro")
    by_name = {r.name: r for r in rows}
    assert len(rows) == 11 and set(by_name) == {u["name"] for u in old + new}
    for u in old:  # written with version 0: no email field
        r = by_name[u["name"]]
        assert (r.age, r.tags, r.email, r.schema_version) == (u["age"], u["tags"], None, bytes(8))
    for u in new:
        r = by_name[u["name"]]
        assert (r.age, r.tags, r.email) == (u["age"], [], u["email"])
        assert int.from_bytes(r.schema_version, "big") == 1

    rows = _decoded(spark, source_options, BASE + "decode-json")
    assert len(rows) == 7
    assert sorted((r.name, r.age, r.email) for r in rows if r.name) == [
        (u["name"], u["age"], u["email"]) for u in new
    ]
    assert all(r.schema_version == bytes(8) for r in rows if r.name)  # kept when forwarded
    assert [r.schema_version for r in rows if r.name is None] == [None]  # published without a schema

    with pytest.raises(Exception, match="different schemas"):
        spark.read.format("folio").options(
            **source_options, topics=f"{BASE}decode-avro,{BASE}decode-json", decode="true"
        ).load()
    publish(url, BASE + "decode-none", [Sent(BASE + "decode-none", None, b"x")])
    with pytest.raises(Exception, match=f"topic {BASE}decode-none has no schema"):
        spark.read.format("folio").options(**source_options, topic=BASE + "decode-none", decode="true").load()
