"""The analytics service on a real cluster, Spark local[2]: runs, increments, queueing,
SQL and fail-over, all through the gateways' admin API (tests/analytics/conftest.py).

Module runtime: one Spark start per service (two services) plus a few seconds per run.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from analytics_stack import Stack
from pasted import code_block, run_pasted

from coordination import keys

NS = "public/default"
NOW_MS = int(time.time() * 1000)
RUN_TIMEOUT_S = 180.0

pytestmark = pytest.mark.timeout(900)


def publish(url: str, topic: str, rows: list[tuple[str | None, str, str]], partitions: int = 0) -> int:
    """REST-publish ``(key, payload, producer)`` rows; the payload bytes published."""
    by_producer: dict[str, list[dict[str, Any]]] = {}
    for key, payload, producer in rows:
        message: dict[str, Any] = {"payload": payload, "eventTime": NOW_MS - 1500}
        if key is not None:
            message["key"] = key
        by_producer.setdefault(producer, []).append(message)
    with httpx.Client(timeout=60) as http:
        for producer, messages in by_producer.items():
            for low in range(0, len(messages), 200):
                body = {"producerName": producer, "messages": messages[low : low + 200]}
                reply = http.post(f"{url}/topics/persistent/{NS}/{topic}", json=body)
                assert reply.status_code == 200, reply.text
                assert all(r["errorCode"] == 0 for r in reply.json()["messagePublishResults"])
    return sum(len(p.encode()) for _, p, _ in rows)


def rows_for(count: int, start: int = 0) -> list[tuple[str | None, str, str]]:
    out = []
    for i in range(start, start + count):
        key = "hot" if i % 5 < 2 else (None if i % 17 == 0 else f"k{i % 9}")
        out.append((key, "x" * (10 + i % 300), f"producer-{i % 2}"))
    return out


def run_now(url: str, reading: set[tuple[int, int]] | None = None) -> dict[str, Any]:
    """Request a run and wait for it to finish; the run record then. ``reading`` gets the
    reading progress seen: (entries read by finished tasks, entries planned)."""
    with httpx.Client(timeout=30) as http:
        requested = http.post(f"{url}/admin/v2/analytics/run")
        assert requested.status_code == 202, requested.text
        target = requested.json()["runId"] + 1
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            record = http.get(f"{url}/admin/v2/analytics/run").json()
            if reading is not None and record["progress"]["phase"] == "reading":
                reading.add((record["progress"]["done"], record["progress"]["total"]))
            if record["runId"] >= target and record["state"] == "idle":
                assert record["error"] is None, record
                return record
            time.sleep(0.2)
    raise AssertionError(f"run {target} did not finish: {record}")


def results(url: str, topic: str) -> dict[str, Any]:
    reply = httpx.get(f"{url}/admin/v2/analytics/topics/persistent/{NS}/{topic}", timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def expected_keys(rows: list[tuple[str | None, str, str]]) -> dict[str, int]:
    return dict(Counter(k for k, _, _ in rows if k is not None))


def test_statistics_equal_what_was_published(stack: Stack) -> None:
    url = stack.url
    assert (
        httpx.put(f"{url}/admin/v2/persistent/{NS}/orders/partitions", json=2, timeout=30).status_code == 204
    )
    sub = httpx.put(f"{url}/admin/v2/persistent/{NS}/events/subscription/audit", json="earliest", timeout=30)
    assert sub.status_code == 204, sub.text
    rows = rows_for(600)
    size = publish(url, "orders", rows)
    event_rows = rows_for(200)
    event_size = publish(url, "events", event_rows)
    reading: set[tuple[int, int]] = set()
    record = run_now(url, reading)
    assert record["last"]["messagesRead"] >= 800, record
    print(f"reading progress seen (entries read, planned): {sorted(reading)}; last: {record['last']}")
    assert 6 <= record["last"]["entriesRead"] <= 800, record  # at least one entry per REST request
    assert any(total > 0 for _, total in reading) and all(d <= t for d, t in reading), reading

    orders = results(url, "orders")
    got = orders["results"]
    assert (got["messages"], got["bytes"]) == (600, size)
    assert {k["key"]: k["messages"] for k in got["topKeys"]} == expected_keys(rows)
    assert got["topKeysError"] == 0 and got["distinctKeys"] == len(expected_keys(rows))
    assert got["keylessMessages"] == sum(1 for k, _, _ in rows if k is None)
    assert (got["sizes"]["min"], got["sizes"]["max"]) == (10, 309)
    assert {p["name"]: p["messages"] for p in got["producers"]} == {"producer-0": 300, "producer-1": 300}
    assert got["lag"]["count"] == 600 and got["lag"]["min"] >= 1500
    assert any("hot key 'hot'" in w for w in got["warnings"]), got["warnings"]
    assert sum(r["messages"] for r in orders["read"].values()) == 600 and set(orders["read"]) == {"0", "1"}

    events = results(url, "events")["results"]
    assert (events["messages"], events["bytes"]) == (200, event_size)
    audit = events["subscriptions"]["audit"]
    assert (audit["backlog"], audit["backlogBytes"]) == (200, event_size)
    assert audit["ageMs"] >= 0 and audit["type"] in ("", "Exclusive", "Shared", "Failover", "Key_Shared")

    summary = httpx.get(f"{url}/admin/v2/analytics/summary", timeout=30).json()["summary"]
    assert summary["messages"] >= 800
    assert any(row["topic"] == f"persistent://{NS}/orders" for row in summary["largest"])
    assert any(row["subscription"] == "audit" for row in summary["behind"])


def test_second_run_reads_only_new_entries_and_equals_a_full_run(stack: Stack) -> None:
    url = stack.url
    before = results(url, "orders")
    more = rows_for(100, start=600)
    publish(url, "orders", more)
    run_now(url)
    after = results(url, "orders")
    read = after["read"]
    assert sum(r["messages"] for r in read.values()) == 100, read  # only the new messages were read
    for partition, got in read.items():
        if got["messages"]:
            assert tuple(got["from"]) > tuple(before["positions"][partition]), (got, before["positions"])
    incremental = after["results"]
    assert incremental["messages"] == 700

    async def forget() -> None:  # drop the stored state: the next run reads everything again
        store = await stack.cluster.ledgers.store()
        for index in (0, 1):
            await store.delete(keys.analytics_topic(f"persistent/{NS}/orders-partition-{index}"))

    asyncio.run(forget())
    run_now(url)
    full = results(url, "orders")
    assert sum(r["messages"] for r in full["read"].values()) == 700
    same = ("messages", "bytes", "sizes", "topKeys", "distinctKeys", "producers", "lag", "ratePerMinute")
    assert {k: full["results"][k] for k in same} == {k: incremental[k] for k in same}


def test_a_request_during_a_run_is_queued_once(stack: Stack) -> None:
    url = stack.url
    with httpx.Client(timeout=30) as http:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        seen_progress = set()
        caught = False
        while not caught:  # a run that ends between two polls is missed: request another
            first = http.post(f"{url}/admin/v2/analytics/run").json()
            while True:
                record = http.get(f"{url}/admin/v2/analytics/run").json()
                if record["runId"] == first["runId"] + 1 and record["state"] == "running":
                    caught = True
                    break
                if record["runId"] > first["runId"] and record["state"] == "idle" and not record["queued"]:
                    break  # it ran and ended unseen
                assert time.monotonic() < deadline, record
                time.sleep(0.05)
        second = http.post(f"{url}/admin/v2/analytics/run").json()
        third = http.post(f"{url}/admin/v2/analytics/run").json()
        assert (second["outcome"], third["outcome"]) == ("queued", "alreadyQueued")
        while True:
            record = http.get(f"{url}/admin/v2/analytics/run").json()
            seen_progress.add((record["progress"]["phase"], record["progress"]["done"]))
            if record["state"] == "idle" and not record["queued"] and record["runId"] >= first["runId"] + 2:
                break
            assert time.monotonic() < deadline, record
            time.sleep(0.1)
        time.sleep(2.0)
        final = http.get(f"{url}/admin/v2/analytics/run").json()
    assert final["runId"] == first["runId"] + 2, final  # the two requests during the run made one run
    assert ("done", final["progress"]["total"]) in seen_progress or final["progress"]["phase"] == "done"


def ask(http: httpx.Client, base: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST a query; on 202 (still running when the request's wait ended) poll it. The
    status a request waiting long enough gets (200, or 400 with the reason), and the body."""
    reply = http.post(base, json=body)
    if reply.status_code != 202:
        return reply.status_code, reply.json()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        record = http.get(f"{base}/{reply.json()['id']}").json()
        if record["state"] == "done":
            return 200, record
        if record["state"] == "error":
            return 400, {"reason": record["error"], "code": "query_failed"}
        time.sleep(0.3)
    raise AssertionError(f"query did not finish: {record}")


def test_sql_over_topics_and_its_bounds(stack: Stack) -> None:
    url = stack.url
    base = f"{url}/admin/v2/analytics/sql"
    with httpx.Client(timeout=120) as http:
        query = (
            f'SELECT key, count(*) AS n FROM "{NS}/orders" WHERE key IS NOT NULL GROUP BY key ORDER BY key'
        )
        status, answer = ask(http, base, {"query": query})
        assert status == 200, answer
        assert [c["name"] for c in answer["columns"]] == ["key", "n"]
        expected = expected_keys(rows_for(700))
        assert {k: n for k, n in answer["rows"]} == expected
        csv = http.get(f"{base}/{answer['id']}/csv")
        assert csv.status_code == 200 and csv.text.splitlines()[0] == "key,n"
        assert len(csv.text.splitlines()) == len(expected) + 1
        assert answer["id"] in [q["id"] for q in http.get(base).json()]

        cut = ask(http, base, {"query": f'SELECT * FROM "{NS}/orders"', "maxRows": 3})[1]
        assert cut["truncated"] and len(cut["rows"]) == 3

        status, bad = ask(http, base, {"query": "SELEC nothing"})
        assert status == 400 and bad["reason"].startswith("query failed"), bad
        status, unknown = ask(http, base, {"query": f'SELECT * FROM "{NS}/nosuchtopic"'})
        assert status == 400, unknown
        assert unknown["reason"].startswith(f"topic persistent://{NS}/nosuchtopic does not exist; create it")
        assert "Traceback" not in unknown["reason"], unknown
        status, big = ask(http, base, {"query": f'SELECT value FROM "{NS}/orders"', "maxBytes": 100})
        assert status == 400 and "over the query's bound of 100 bytes" in big["reason"], big
        slow = f'SELECT count(*) FROM "{NS}/orders" a CROSS JOIN range(4000000000) b'
        began = time.monotonic()
        status, stopped = ask(http, base, {"query": slow, "timeoutSeconds": 2})
        print(f"time-bound query answered after {time.monotonic() - began:.1f} s")
        assert status == 400 and "time bound of 2 s" in stopped["reason"], stopped


def run_tour(stack: Stack, script: str, cwd: Path, timeout_s: float) -> str:
    return run_pasted(stack.cluster.urls, script, cwd, timeout_s, curl_max_s=120)


@pytest.mark.timeout(1200)  # a second Spark session beside the service's, on a shared 2-core box
def test_the_readme_spark_job_and_sql_query(stack: Stack, tmp_path: Path) -> None:
    """The README tour's step 1 (publish three messages), then step 4 as written: the
    Spark script saved as tour_keys.py and run with the venv's python (only the etcd
    address, and this cluster's etcd namespace, swapped in), and the SQL query by curl."""
    run_tour(stack, code_block("### 1. Publish and consume with curl"), tmp_path, 60)
    ledgers = stack.cluster.ledgers
    script = code_block("### 4. A Spark job", "python").replace(
        '.option("etcd", "127.0.0.1:2379")',
        f'.option("etcd", "{ledgers.endpoint}").option("etcdNamespace", "{ledgers.namespace}")',
    )
    assert ledgers.endpoint in script
    (tmp_path / "tour_keys.py").write_text(script)
    shown = run_tour(stack, code_block("and run it with the project's Python"), tmp_path, 900)
    rows = re.findall(r"^\|\s*(\S+)\s*\|\s*(\d+)\s*\|$", shown, re.M)
    assert rows == [("a", "1"), ("b", "1"), ("user-42", "1")], shown
    sql = code_block("same question in SQL")
    deadline = time.monotonic() + 120
    while True:  # the service may be re-electing itself after the script's Spark starved its lease
        try:
            answer = orjson.loads(run_tour(stack, sql, tmp_path, 150))
            break
        except AssertionError as refused:
            if "analytics_unavailable" not in str(refused) or time.monotonic() > deadline:
                raise
            time.sleep(2)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while answer["state"] in ("pending", "running") and time.monotonic() < deadline:
        time.sleep(1)  # 202: still running when the request's wait ended, polled as the API says
        answer = httpx.get(f"{stack.url}/admin/v2/analytics/sql/{answer['id']}", timeout=30).json()
    assert answer["state"] == "done", answer.get("error")
    assert answer["rows"] == [["a", 1], ["b", 1], ["user-42", 1]], answer


PERSON = {
    "type": "record",
    "name": "Person",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "score", "type": ["null", "double"], "default": None},
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}],
            },
        },
    ],
}
CITIES = ("Oslo", "Lima", "Pune")


def person(i: int) -> dict[str, Any]:
    return {
        "name": f"user{i % 10}",
        "age": 20 + i % 30,
        "score": None if i % 5 == 0 else i * 0.5,
        "address": {"city": CITIES[i % 3], "zip": None if i % 4 == 0 else 1000 + i},
    }


def test_json_and_avro_topics_get_a_profile_of_their_fields(stack: Stack) -> None:
    url = stack.url
    people = [person(i) for i in range(60)]
    schema = {
        "name": "",
        "schema": base64.b64encode(orjson.dumps(PERSON)).decode(),
        "properties": {},
    }
    with httpx.Client(timeout=60) as http:
        for kind in ("JSON", "AVRO"):
            for low in (0, 30):  # two requests: two entries
                body = {
                    "valueSchema": orjson.dumps({**schema, "type": kind}).decode(),
                    "messages": [{"payload": orjson.dumps(p).decode()} for p in people[low : low + 30]],
                }
                reply = http.post(f"{url}/topics/persistent/{NS}/people-{kind.lower()}", json=body)
                assert reply.status_code == 200, reply.text
    run_now(url)
    scores = [p["score"] for p in people if p["score"] is not None]
    for kind in ("json", "avro"):
        got = results(url, f"people-{kind}")["results"]
        assert got["messages"] == 60
        fields = got["fields"]
        assert (fields["messages"], fields["undecoded"]) == (60, 0), fields
        by = {f["path"]: f for f in fields["fields"]}
        assert list(by) == ["name", "age", "score", "address.city", "address.zip"]
        assert (by["age"]["min"], by["age"]["max"], by["age"]["nullFraction"]) == (20, 49, 0.0)
        assert abs(by["age"]["distinct"] - 30) <= 1 and abs(by["name"]["distinct"] - 10) <= 1
        assert (by["name"]["min"], by["name"]["max"]) == ("user0", "user9")
        assert (by["score"]["min"], by["score"]["max"]) == (min(scores), max(scores))
        assert by["score"]["nullFraction"] == 12 / 60
        assert (by["address.city"]["min"], by["address.city"]["max"], by["address.city"]["distinct"]) == (
            "Lima",
            "Pune",
            3,
        )
        assert by["address.zip"]["nulls"] == 15 and by["address.zip"]["max"] == 1059
    plain = results(url, "events")["results"]
    assert plain["fields"] is None  # a topic without a schema has no field profile


def test_a_namespace_policy_schedules_runs_of_that_namespace_only(stack: Stack) -> None:
    url = stack.url
    policy = f"{url}/admin/v2/namespaces/public/sched/analyticsInterval"
    with httpx.Client(timeout=30) as http:
        assert http.put(f"{url}/admin/v2/analytics/settings", json={"intervalSeconds": 0}).status_code == 204
        assert http.put(f"{url}/admin/v2/namespaces/public/sched").status_code == 204
        assert http.post(policy, json=-1).status_code == 400
        assert http.get(policy).json() is None  # unset: the cluster's schedule
        body = {"messages": [{"payload": f"m{i}"} for i in range(20)]}
        assert http.post(f"{url}/topics/persistent/public/sched/ticks", json=body).status_code == 200
        before = results(url, "orders")["runId"]
        assert http.post(policy, json=1).status_code == 204
        assert http.get(policy).json() == 1
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            record = http.get(f"{url}/admin/v2/analytics/run").json()
            if record["reason"] == "scheduled" and record["state"] == "idle" and record["scope"]:
                break
            assert time.monotonic() < deadline, record
            time.sleep(0.2)
        assert record["scope"] == ["public/sched"] and record["error"] is None, record
        ticks = http.get(f"{url}/admin/v2/analytics/topics/persistent/public/sched/ticks").json()
        assert ticks["results"]["messages"] == 20
        assert results(url, "orders")["runId"] == before  # public/default is not on a schedule
        summary = http.get(f"{url}/admin/v2/analytics/summary").json()["summary"]
        listed = {row["topic"] for row in summary["largest"]}
        assert {"persistent://public/sched/ticks", f"persistent://{NS}/orders"} <= listed, listed
        assert http.delete(policy).status_code == 204 and http.get(policy).json() is None


def test_a_killed_service_is_replaced_and_continues_from_stored_positions(stack: Stack) -> None:
    url = stack.url
    standby = stack.start_service("svc-b", wait_leader=False)
    assert not standby.leader.wait(3.0)  # svc-a leads; svc-b waits
    before = results(url, "orders")
    publish(url, "orders", rows_for(50, start=700))
    stack.services[0].kill9()
    began = time.monotonic()
    assert standby.leader.wait(240), standby.log_tail()
    print(f"standby elected with Spark up after {time.monotonic() - began:.1f} s")
    run_now(url)
    after = results(url, "orders")
    assert sum(r["messages"] for r in after["read"].values()) == 50, after["read"]
    assert after["results"]["messages"] == before["results"]["messages"] + 50
