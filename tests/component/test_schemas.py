"""Topic schemas on a real cluster: the admin schema API, the REST producer's
``valueSchema``/``schemaVersion``, and versions that outlive their gateway.

One cluster for the module (etcd, 3 storage nodes, 2 gateways). What it shows:
- Pulsar's admin schema API adds, returns, lists, checks and deletes versions;
  the namespace's strategy refuses an incompatible evolution (409) and
  ``isAllowAutoUpdateSchema=false`` keeps producers from adding versions;
- a REST publish whose payload does not fit the JSON/AVRO schema is 400
  naming the field, and no message of the request is stored;
- the schema version a message was encoded with is in the log: peek
  (``X-Pulsar-schema-version``) shows it after the topic's owner is killed -9
  and another gateway serves the topic, reading the old entries back;
- the versions themselves survive that kill (they live in etcd);
- a WebSocket publish naming ``schemaVersion`` is checked against it and keeps it.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio
from clusters import MessagingCluster
from failover_clients import owner_of
from wsclient import Producer, module_cluster

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

_topics = itertools.count()
NS = "public/default"
USER = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USER_V2 = {
    **USER,
    "fields": [*USER["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
}
USER_BAD = {**USER, "fields": [{"name": "name", "type": "int"}]}


def topic() -> str:
    return f"schema-{next(_topics)}"


def value_schema(kind: str, definition: dict[str, Any]) -> str:
    """Pulsar's ``SchemaInfo`` JSON as its REST producers send it."""
    encoded = base64.b64encode(orjson.dumps(definition)).decode()
    return orjson.dumps({"name": "", "schema": encoded, "type": kind, "properties": {}}).decode()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("schemas")) as made:
        yield made


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=20, follow_redirects=True) as client:
        yield client


async def test_admin_schema_api(cluster: MessagingCluster, http: httpx.AsyncClient) -> None:
    name = topic()
    base = f"{cluster.urls[0]}/admin/v2/schemas/{NS}/{name}"
    other = f"{cluster.urls[1]}/admin/v2/schemas/{NS}/{name}"
    assert (await http.get(f"{base}/schema")).status_code == 404
    assert (await http.get(f"{base}/schemas")).status_code == 404  # Pulsar's list: 404 when none
    assert (await http.get(f"{base}/versions")).json() == {"getSchemaResponses": []}  # Folio's: empty
    v1 = {"type": "JSON", "schema": orjson.dumps(USER).decode(), "properties": {"a": "b"}}
    first = await http.post(f"{base}/schema", json=v1)
    assert first.status_code == 200 and first.json() == {"version": {"version": 0}}, first.text
    again = await http.post(f"{other}/schema", json=v1)  # equal to a live version: that version
    assert again.json() == {"version": {"version": 0}}
    got = (await http.get(f"{other}/schema")).json()
    assert (got["version"], got["type"], orjson.loads(got["data"]), got["properties"]) == (
        0,
        "JSON",
        USER,
        {"a": "b"},
    )

    v2 = {"type": "JSON", "schema": orjson.dumps(USER_V2).decode()}
    assert (await http.post(f"{base}/compatibility", json=v2)).json() == {
        "isCompatible": True,
        "schemaCompatibilityStrategy": "UNDEFINED",
    }
    assert (await http.post(f"{base}/schema", json=v2)).json() == {"version": {"version": 1}}
    bad = {"type": "JSON", "schema": orjson.dumps(USER_BAD).decode()}
    check = (await http.post(f"{base}/compatibility", json=bad)).json()
    assert check["isCompatible"] is False
    refused = await http.post(f"{base}/schema", json=bad)
    assert refused.status_code == 409 and refused.json()["code"] == "incompatible_schema", refused.text
    # the namespace's strategy decides: ALWAYS_COMPATIBLE lets it in (set with Pulsar's PUT)
    strategy = f"{cluster.urls[1]}/admin/v2/namespaces/{NS}/schemaCompatibilityStrategy"
    assert (await http.put(strategy, json="ALWAYS_COMPATIBLE")).status_code == 204
    try:
        assert (await http.get(strategy)).json() == "ALWAYS_COMPATIBLE"
        assert (await http.post(f"{base}/schema", json=bad)).json() == {"version": {"version": 2}}
    finally:
        assert (await http.delete(strategy)).status_code == 204
    assert (await http.put(strategy, json="SIDEWAYS")).status_code == 400

    versions = (await http.get(f"{other}/versions")).json()["getSchemaResponses"]
    assert [v["version"] for v in versions] == [0, 1, 2]
    assert (await http.get(f"{base}/schemas")).json()["getSchemaResponses"] == versions
    assert (await http.get(f"{base}/schema/1")).json()["version"] == 1
    assert (await http.get(f"{base}/schema/9")).status_code == 404

    deleted = await http.delete(f"{base}/schema")
    assert deleted.status_code == 200 and deleted.json() == {"version": 3}
    assert (await http.get(f"{base}/schema")).status_code == 404
    assert (await http.delete(f"{base}/schema")).status_code == 404
    # a new lineage: any schema may start it; versions are never reused
    fresh = await http.post(f"{base}/schema", json={"type": "STRING", "schema": ""})
    assert fresh.json() == {"version": {"version": 4}}
    for body in ({"type": "XML"}, {"type": "AVRO", "schema": "{}"}, {"schema": ""}):
        response = await http.post(f"{base}/schema", json=body)
        assert response.status_code == 400 and response.json()["code"] == "invalid_schema", response.text


async def stored_count(http: httpx.AsyncClient, url: str, name: str) -> int:
    stats = await http.get(f"{url}/admin/v2/persistent/{NS}/{name}/stats")
    assert stats.status_code == 200, stats.text
    return int(stats.json()["msgInCounter"])


async def hold(http: httpx.AsyncClient, url: str, name: str) -> None:
    """A durable subscription holds the topic's messages. Without one, and without a
    retention policy, the ledger a new owner closes may be trimmed before a test reads it
    back, as Pulsar trims what nothing holds."""
    held = await http.put(f"{url}/admin/v2/persistent/{NS}/{name}/subscription/held")
    assert held.status_code == 204, held.text


async def peek(http: httpx.AsyncClient, url: str, name: str, position: int) -> httpx.Response:
    response = await http.get(
        f"{url}/admin/v2/persistent/{NS}/{name}/examinemessage",
        params={"initialPosition": "earliest", "messagePosition": position},
    )
    assert response.status_code == 200, response.text
    return response


@pytest.mark.parametrize("kind", ["JSON", "AVRO"])
async def test_rest_payload_that_does_not_fit_is_refused_and_nothing_is_stored(
    cluster: MessagingCluster, http: httpx.AsyncClient, kind: str
) -> None:
    name = topic()
    url = f"{cluster.urls[0]}/topics/persistent/{NS}/{name}"
    assert (await http.put(f"{cluster.urls[1]}/admin/v2/persistent/{NS}/{name}")).status_code == 204
    good = orjson.dumps({"name": "ann", "age": 30}).decode()
    body = {
        "valueSchema": value_schema(kind, USER),
        "messages": [{"payload": good}, {"payload": '{"name":"bob","age":"old"}'}],
    }
    refused = await http.post(url, json=body)
    assert refused.status_code == 400, refused.text
    reason = refused.json()["reason"]
    assert reason == 'messages[1].payload: field `age` of User: expected an int, got the string "old"', reason
    assert await stored_count(http, cluster.urls[1], name) == 0  # not even the good first message

    body["messages"] = [{"payload": good}, {"payload": '{"name":"bob","age":41}'}]
    stored = await http.post(url, json=body)
    assert stored.status_code == 200, stored.text
    acks = stored.json()
    assert acks["schemaVersion"] == 0 and all(r["errorCode"] == 0 for r in acks["messagePublishResults"])
    assert [r["schemaVersion"] for r in acks["messagePublishResults"]] == [0, 0]
    first = await peek(http, cluster.urls[1], name, 1)
    assert first.headers["X-Pulsar-schema-version"] == "0"
    if kind == "JSON":
        assert orjson.loads(first.content) == {"name": "ann", "age": 30}
    else:
        assert first.content == b"\x06ann\x3c"  # Avro binary: string "ann", int 30 (zig-zag)
    # schemaVersion names the registered version; a version the topic lacks is 404
    by_version = await http.post(url, json={"schemaVersion": 0, "messages": [{"payload": good}]})
    assert by_version.json()["schemaVersion"] == 0, by_version.text
    missing = await http.post(url, json={"schemaVersion": 7, "messages": [{"payload": good}]})
    assert missing.status_code == 404 and missing.json()["code"] == "schema_not_found", missing.text
    assert await stored_count(http, cluster.urls[1], name) == 3


async def test_producers_may_not_add_versions_when_auto_update_is_off(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    name = topic()
    url = f"{cluster.urls[1]}/topics/persistent/{NS}/{name}"
    setting = f"{cluster.urls[0]}/admin/v2/namespaces/{NS}/isAllowAutoUpdateSchema"
    message = {"payload": '{"name":"a","age":1}'}
    first = await http.post(url, json={"valueSchema": value_schema("JSON", USER), "messages": [message]})
    assert first.status_code == 200, first.text  # the first schema of a topic is always allowed
    assert (await http.post(setting, json=False)).status_code == 204
    try:
        assert (await http.get(setting)).json() is False
        evolved = await http.post(
            url, json={"valueSchema": value_schema("JSON", USER_V2), "messages": [message]}
        )
        assert evolved.status_code == 409 and "isAllowAutoUpdateSchema" in evolved.text, evolved.text
        same = await http.post(url, json={"valueSchema": value_schema("JSON", USER), "messages": [message]})
        assert same.status_code == 200, same.text  # an existing version is still fine
    finally:
        assert (await http.delete(setting)).status_code == 204


async def test_websocket_publish_names_its_schema_version(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    """A WebSocket publish frame's ``schemaVersion`` (in Pulsar's model): the payload must
    be that version's bytes; the reply says the version and the message keeps it."""
    name = topic()
    base = f"{cluster.urls[0]}/admin/v2/schemas/{NS}/{name}"
    added = await http.post(f"{base}/schema", json={"type": "AVRO", "schema": orjson.dumps(USER).decode()})
    assert added.json() == {"version": {"version": 0}}, added.text
    avro = b"\x06ann\x3c"  # {"name": "ann", "age": 30}
    producer = await Producer.connect(cluster.ws(1), name)
    try:
        ok = await producer.send(avro, schemaVersion=0)
        assert (ok["result"], ok["schemaVersion"]) == ("ok", 0), ok
        bad = await producer.send(b"\x06ann", schemaVersion=0)  # the age is missing
        assert bad["result"] == "send-error:7" and bad["errorCode"] == 2 and "payload" in bad["errorMsg"], bad
        unknown = await producer.send(avro, schemaVersion=5)
        assert unknown["result"] == "send-error:7" and "no such version" in unknown["errorMsg"], unknown
        plain = await producer.send(b"no schema named")  # as Pulsar's WebSocket producers publish
        assert (plain["result"], plain["schemaVersion"]) == ("ok", 0), plain
    finally:
        await producer.close()
    assert await stored_count(http, cluster.urls[0], name) == 2
    first = await peek(http, cluster.urls[0], name, 1)
    assert first.headers["X-Pulsar-schema-version"] == "0" and first.content == avro
    assert "X-Pulsar-schema-version" not in (await peek(http, cluster.urls[0], name, 2)).headers


async def test_versions_and_stamped_messages_survive_an_ownership_move(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    """The topic is unloaded (ownership released; the load manager picks the next owner,
    which may be the same gateway): the topic loaded again reads the stamped messages
    back and takes new ones by the registered version. The kill -9 test below is the
    move to another gateway."""
    name = topic()
    await hold(http, cluster.urls[0], name)
    url = f"{cluster.urls[0]}/topics/persistent/{NS}/{name}"
    body = {"valueSchema": value_schema("JSON", USER), "messages": [{"payload": '{"name":"a","age":1}'}]}
    assert (await http.post(url, json=body)).status_code == 200
    before = await owner_of(cluster.urls[0], name)
    unloaded = await http.put(f"{cluster.urls[1]}/admin/v2/persistent/{NS}/{name}/unload")
    assert unloaded.status_code == 204, unloaded.text
    again = {"schemaVersion": 0, "messages": [{"payload": '{"name":"b","age":2}'}]}
    deadline = time.monotonic() + 30
    while True:
        moved = await http.post(f"{cluster.urls[1]}/topics/persistent/{NS}/{name}", json=again)
        if moved.status_code == 200 and moved.json()["messagePublishResults"][0]["errorCode"] == 0:
            break
        assert time.monotonic() < deadline, moved.text
        await asyncio.sleep(0.3)
    print(f"owner before the unload {before}, after {await owner_of(cluster.urls[0], name)}")
    peeked = [await peek(http, cluster.urls[1], name, i) for i in (1, 2)]
    assert [p.headers["X-Pulsar-schema-version"] for p in peeked] == ["0", "0"]
    versions = (await http.get(f"{cluster.urls[1]}/admin/v2/schemas/{NS}/{name}/versions")).json()
    assert [v["version"] for v in versions["getSchemaResponses"]] == [0]


async def test_versions_and_stamped_messages_survive_the_owner_being_killed(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    """Runs last in the module: it kills a gateway and starts it again afterwards."""
    name = topic()
    await hold(http, cluster.urls[0], name)
    owner = cluster.urls.index(await owner_of(cluster.urls[0], name))
    survivor = cluster.urls[1 - owner]
    base = f"{survivor}/admin/v2/schemas/{NS}/{name}"
    url = f"{cluster.urls[owner]}/topics/persistent/{NS}/{name}"
    for definition in (USER, USER_V2):
        reply = await http.post(
            url,
            json={
                "valueSchema": value_schema("AVRO", definition),
                "messages": [{"payload": '{"name":"a","age":1}'}],
            },
        )
        assert reply.status_code == 200, reply.text
    assert [v["version"] for v in (await http.get(f"{base}/versions")).json()["getSchemaResponses"]] == [0, 1]

    killed_at = time.monotonic()
    cluster.gateways[owner].kill9()
    try:
        again = f"{survivor}/topics/persistent/{NS}/{name}"
        deadline = time.monotonic() + 60
        while True:  # the survivor takes the topic over once the dead owner's lease expires
            moved = await http.post(
                again, json={"schemaVersion": 1, "messages": [{"payload": '{"name":"b","age":2}'}]}
            )
            if moved.status_code == 200 and moved.json()["messagePublishResults"][0]["errorCode"] == 0:
                break
            assert time.monotonic() < deadline, moved.text
            await asyncio.sleep(0.5)
        print(f"topic served again {time.monotonic() - killed_at:.1f} s after the kill -9")
        versions = (await http.get(f"{base}/versions")).json()["getSchemaResponses"]
        assert [(v["version"], v["type"]) for v in versions] == [(0, "AVRO"), (1, "AVRO")]
        stamped = [
            (await peek(http, survivor, name, i)).headers["X-Pulsar-schema-version"] for i in (1, 2, 3)
        ]
        assert stamped == ["0", "1", "1"]  # read back from the log by the new owner
    finally:
        await cluster.restart_gateway(owner)
