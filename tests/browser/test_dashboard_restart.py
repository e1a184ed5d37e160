"""After every gateway restarts, the dashboard's cluster views still tell the truth
(real Chromium, real etcd + 3 storage nodes + 2 gateways, its own cluster).

Shows: topics with backlog and subscriptions (one subscription partly acknowledged)
show, after both gateways were stopped and started again and before any client
touched those topics, the same backlog, storage size and subscription counts in
the topic list, the same backlog per subscription in the subscriptions view and
the same backlog and storage totals in the overview as before - each topic and
subscription marked as stored figures (``loaded: false``, ``figures: "stored"``),
so the figures come from the stored ledger lists and cursors, not a reloaded
topic (a gateway without stored figures shows those topics as rows of zeros,
and this test fails there). Then a topic whose backlog keeps growing is named
by Problems. No console errors.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import orjson
import pytest
from dashkit import DashCluster, errors_of, run_async, save_artifact
from playwright.sync_api import Page, expect
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.component

A = "admin/v2"


def publish(base: str, ns: str, topic: str, count: int) -> None:
    messages = [{"payload": f"m-{i}", "key": f"k-{i}"} for i in range(count)]
    r = httpx.post(f"{base}/topics/persistent/{ns}/{topic}", json={"messages": messages}, timeout=30)
    r.raise_for_status()


def subscribe(base: str, ns: str, topic: str, sub: str, ack: int = 0) -> None:
    """A durable subscription at the earliest position; ``ack`` messages received and acknowledged."""
    url = base.replace("http://", "ws://") + (
        f"/ws/v2/consumer/persistent/{ns}/{topic}/{sub}?subscriptionInitialPosition=Earliest"
    )
    with ws_connect(url, open_timeout=10) as ws:
        for _ in range(ack):
            message = orjson.loads(ws.recv(timeout=10))
            ws.send(orjson.dumps({"messageId": message["messageId"]}).decode())
        if ack:
            time.sleep(0.5)  # the acknowledgements reach the gateway before the socket closes


def get(base: str, path: str, **params: str) -> Any:
    r = httpx.get(f"{base}/{A}/{path}", params=params, timeout=30)
    r.raise_for_status()
    return r.json()


def topic_rows(base: str, ns: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in get(base, f"cluster/topics/{ns}")}


def sub_rows(base: str, ns: str) -> dict[tuple[str, str], dict[str, Any]]:
    tenant, namespace = ns.split("/")
    rows = get(base, "cluster/subscriptions", tenant=tenant, namespace=namespace)
    return {(r["topic"].rsplit("/", 1)[-1], r["name"]): r for r in rows}


FIELDS = ("msgBacklog", "storageSize", "subscriptionCount")


def test_views_tell_the_truth_after_every_gateway_restarts(
    dash_cluster: DashCluster, page: Page, artifacts: Path
) -> None:
    base = dash_cluster.urls[0]
    ns = f"public/rs{uuid4().hex[:6]}"
    assert httpx.put(f"{base}/{A}/namespaces/{ns}", timeout=10).status_code == 204
    plan = {"orders": (("audit", 0), ("billing", 0), ("ship", 3)), "events": (("audit", 0),)}
    for topic, subs in plan.items():
        assert httpx.put(f"{base}/{A}/persistent/{ns}/{topic}", timeout=10).status_code == 204
        for sub, _ in subs:
            subscribe(base, ns, topic, sub)
    publish(base, ns, "orders", 10)
    publish(base, ns, "events", 4)
    subscribe(base, ns, "orders", "ship", ack=3)
    before = topic_rows(base, ns)
    subs_before = sub_rows(base, ns)
    assert before["orders"]["msgBacklog"] == 10 + 10 + 7 and before["orders"]["subscriptionCount"] == 3
    assert before["events"]["msgBacklog"] == 4 and before["orders"]["storageSize"] > 0
    assert subs_before[("orders", "ship")]["msgBacklog"] == 7
    overview_before = get(base, "cluster/overview")["totals"]

    for gateway in dash_cluster.gateways:  # stopped as an operator restarts them
        gateway.terminate()
    for index in range(len(dash_cluster.gateways)):
        run_async(dash_cluster.restart_gateway(index))
    base = dash_cluster.urls[0]

    after = topic_rows(base, ns)
    for topic in plan:
        row = after[topic]
        assert (row["loaded"], row["figures"]) == (False, "stored"), row  # nobody has loaded it
        assert {f: row[f] for f in FIELDS} == {f: before[topic][f] for f in FIELDS}, (topic, row)
        assert row["exact"] and row["asOfMs"] <= time.time() * 1000
    subs_after = sub_rows(base, ns)
    assert {k: r["msgBacklog"] for k, r in subs_after.items()} == {
        k: r["msgBacklog"] for k, r in subs_before.items()
    }
    assert all(r["figures"] == "stored" for r in subs_after.values())
    overview_after = get(base, "cluster/overview")["totals"]
    for field in ("msgBacklog", "storageSize", "topics"):
        assert overview_after[field] == overview_before[field], field
    assert overview_after["storedTopics"] >= len(plan)

    # the pages show the same figures
    page.goto(f"{base}/ui/tenants/{ns}")
    table = page.locator('[data-testid="list-table"]')
    for topic in plan:
        row = table.locator(f'tbody tr[data-row="{topic}"]')
        expect(row.locator('td[data-col="msgBacklog"]')).to_have_text(str(before[topic]["msgBacklog"]))
        expect(row.locator('td[data-col="subscriptionCount"]')).to_have_text(
            str(before[topic]["subscriptionCount"])
        )
        expect(row.locator('[data-testid="row-figures"]')).to_contain_text("stored")
    save_artifact(page, artifacts, "dashboard-restart-topics.png")

    page.goto(f"{base}/ui/subscriptions?tenant=public&namespace={ns.split('/')[1]}")
    view = page.locator('[data-testid="subs-view"]')
    for (topic, sub), row in subs_before.items():
        line = view.locator(f'tbody tr[data-sub="{sub}"][data-topic="persistent://{ns}/{topic}"]')
        expect(line.locator('td[data-col="msgBacklog"]')).to_have_text(str(row["msgBacklog"]))
    save_artifact(page, artifacts, "dashboard-restart-subscriptions.png")

    page.goto(f"{base}/")
    backlog_tile = page.locator('[data-tile="Backlog"] .tile-value')
    expect(backlog_tile).to_have_text(f"{overview_before['msgBacklog']:,}")
    expect(page.locator('[data-testid="figures-note"]')).to_contain_text("not loaded by any gateway")

    # a backlog that keeps growing after the restart is a problem the overview names
    stop = threading.Event()

    def grow() -> None:
        while not stop.is_set():
            try:
                publish(base, ns, "events", 2)
            except httpx.HTTPError:
                pass
            stop.wait(0.4)

    thread = threading.Thread(target=grow, daemon=True)
    thread.start()
    try:
        expect(page.locator('[data-testid="problems"]')).to_contain_text(
            f"backlog of persistent://{ns}/events keeps growing", timeout=45_000
        )
        save_artifact(page, artifacts, "dashboard-restart-overview.png")
    finally:
        stop.set()
        thread.join(10)
    errors = errors_of(page)
    assert errors == [], dash_cluster.server_errors(errors)


def test_pages_read_plainly(dash_cluster: DashCluster, page: Page, artifacts: Path) -> None:
    """Cursors in words, every namespace policy the admin API has (retention naming
    time and size, Edit buttons in one column), the overview's activity tiles and
    each gateway's CPU and uptime."""
    base = dash_cluster.urls[0]
    ns = f"public/rp{uuid4().hex[:6]}"
    assert httpx.put(f"{base}/{A}/namespaces/{ns}", timeout=10).status_code == 204
    assert httpx.put(f"{base}/{A}/persistent/{ns}/t", timeout=10).status_code == 204
    subscribe(base, ns, "t", "fresh")
    publish(base, ns, "t", 4)
    subscribe(base, ns, "t", "done", ack=4)

    page.goto(f"{base}/ui/topics/persistent/{ns}/t")
    cursors = page.locator('[data-testid="cursors-table"]')
    expect(
        cursors.locator("tbody tr", has_text="fresh").locator('td[data-col="mark-delete"]')
    ).to_contain_text("nothing acknowledged yet")
    expect(
        cursors.locator("tbody tr", has_text="done").locator('td[data-col="mark-delete"]')
    ).to_contain_text(re.compile(r"up to ledger \d+, entry \d+"))
    save_artifact(page, artifacts, "dashboard-topic-cursors.png")

    page.goto(f"{base}/ui/tenants/{ns}")
    for label in (
        "Max consumers per topic",
        "Max subscriptions per topic",
        "Max topics in this namespace",
        "Statistics schedule (analytics)",
    ):
        expect(page.locator(f'[data-policy="{label}"]')).to_be_visible()
    expect(page.locator('[data-policy="Retention"]')).to_contain_text("time: none · size: none")
    edits = page.locator('[data-testid^="policy-edit-"]')
    expect(edits).to_have_count(14)
    xs = {round(edits.nth(i).bounding_box()["x"]) for i in range(14)}  # type: ignore[index]
    assert len(xs) == 1, xs  # one column, whatever each value's length
    page.locator('[data-testid="policy-edit-retention"]').click()
    assert round(page.locator('[data-testid="policy-edit-retention"]').bounding_box()["x"]) in xs  # type: ignore[index]
    page.locator('[data-testid="policy-edit-maxTopicsPerNamespace"]').click()
    page.locator('[data-testid="policy-maxTopicsPerNamespace-limit"]').fill("7")
    page.locator('[data-testid="policy-set-maxTopicsPerNamespace"]').click()
    expect(page.locator('[data-policy="Max topics in this namespace"]')).to_have_text("7")
    assert httpx.get(f"{base}/{A}/namespaces/{ns}", timeout=10).json()["max_topics_per_namespace"] == 7
    save_artifact(page, artifacts, "dashboard-policies.png")

    page.goto(f"{base}/")
    for tile in ("Producers", "Consumers", "Connections", "In bytes/s", "Out bytes/s"):
        expect(page.locator(f'[data-tile="{tile}"] .tile-value')).to_have_text(re.compile(r"^\d"))
    gateways = page.locator('[data-testid="gateways"] tbody tr.gw-row')
    expect(gateways).to_have_count(len(dash_cluster.gateways))
    expect(gateways.first.locator('td[data-col="cpu"]')).to_have_text(re.compile(r"^\d+%$"))
    expect(gateways.first.locator('td[data-col="uptime"]')).to_have_text(re.compile(r"^\d+ (s|min|h|d)$"))
    memory = gateways.first.locator('td[data-col="memory"]')
    expect(memory).to_have_text(re.compile(r"^\d+(\.\d)? (MiB|GiB)$"))
    expect(gateways.first.locator('td[data-col="version"]')).to_have_text(re.compile(r"^\d+\.\d+"))
    errors = errors_of(page)
    assert errors == [], dash_cluster.server_errors(errors)
