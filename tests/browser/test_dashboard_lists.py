"""The dashboard's lists, subscriptions view, policies, deletes and throughput history
in a real Chromium against a real cluster (etcd + 3 storage nodes + 2 gateways, one per module).

Shows: the topic list is sorted by backlog (largest first) and re-sorted from its
header, in the order of the backlogs the admin API reports; the subscriptions
view shows a subscription's backlog and its lag in time (the age of its oldest
unacknowledged message), the active Failover consumer and each Key_Shared
consumer's hash ranges; every namespace
policy set from the page reads back through the admin API, and reset; a delete
asks first - Cancel keeps the topic, Confirm deletes it (tenants, namespaces and
subscriptions alike); the live tail's own reader is in the topic's stats but in
no list the pages show; the overview's throughput history comes from the
gateways and is there at once after a reload. Every page without console errors.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from dashkit import DashCluster, errors_of, save_artifact
from playwright.sync_api import Page, expect
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.component

A = "admin/v2"


def publish(base: str, ns: str, topic: str, count: int) -> float:
    """``count`` messages; the publish time (epoch s) of the first."""
    sent = time.time()
    messages = [{"payload": f"m-{i}"} for i in range(count)]
    r = httpx.post(f"{base}/topics/persistent/{ns}/{topic}", json={"messages": messages}, timeout=30)
    r.raise_for_status()
    assert all(not x.get("errorCode") for x in r.json()["messagePublishResults"])
    return sent


def consumer(base: str, ns: str, topic: str, sub: str, **params: str) -> ClientConnection:
    query = "&".join(f"{k}={v}" for k, v in {"subscriptionInitialPosition": "Earliest", **params}.items())
    url = (
        base.replace("http://", "ws://")
        + f"/ws/v2/consumer/persistent/{ns}/{topic}/{sub}?{query}&pullMode=true"
    )
    return ws_connect(url, open_timeout=10)


def subscribe(base: str, ns: str, topic: str, sub: str) -> None:
    """A durable subscription at the earliest position, no consumer left connected."""
    with consumer(base, ns, topic, sub):
        pass


def backlog(base: str, ns: str, topic: str) -> int:
    stats = httpx.get(f"{base}/{A}/persistent/{ns}/{topic}/stats", timeout=10).json()
    return sum(s["msgBacklog"] for s in stats["subscriptions"].values() if s["isDurable"])


def new_namespace(base: str) -> str:
    ns = f"public/dl{uuid4().hex[:6]}"
    assert httpx.put(f"{base}/{A}/namespaces/{ns}", timeout=10).status_code == 204
    return ns


def assert_clean(cluster: DashCluster, page: Page) -> None:
    errors = errors_of(page)
    assert errors == [], cluster.server_errors(errors)


@pytest.fixture(scope="module")
def traffic(dash_cluster: DashCluster) -> Iterator[None]:
    """Messages flow the whole module, so the gateways' throughput history has rates."""
    base = dash_cluster.urls[0]
    topic = f"flow-{uuid4().hex[:6]}"
    stop = False

    def run() -> None:
        while not stop:
            try:
                publish(base, "public/default", topic, 20)
            except httpx.HTTPError:
                pass
            time.sleep(0.5)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop = True
    thread.join(10)


def test_topic_list_sorted_by_backlog(
    dash_cluster: DashCluster, page: Page, artifacts: Path, traffic: None
) -> None:
    base = dash_cluster.urls[0]
    ns = new_namespace(base)
    for topic, count in (("t-small", 3), ("t-big", 13), ("t-mid", 7), ("t-none", 0)):
        assert httpx.put(f"{base}/{A}/persistent/{ns}/{topic}", timeout=10).status_code == 204
        subscribe(base, ns, topic, "s")
        if count:
            publish(base, ns, topic, count)
    real = {t: backlog(base, ns, t) for t in ("t-small", "t-big", "t-mid", "t-none")}
    assert real == {"t-small": 3, "t-big": 13, "t-mid": 7, "t-none": 0}
    r = httpx.put(f"{base}/{A}/persistent/{ns}/t-parts/partitions", json=2, timeout=10)
    assert r.status_code == 204, r.text
    for i in range(2):
        subscribe(base, ns, f"t-parts-partition-{i}", "s")
    publish(base, ns, "t-parts", 9)  # a row of its own, the sum of its partitions' rows
    for i in range(2):
        real[f"t-parts-partition-{i}"] = backlog(base, ns, f"t-parts-partition-{i}")
    real["t-parts"] = real["t-parts-partition-0"] + real["t-parts-partition-1"]
    assert real["t-parts"] == 9
    rows = f"{dash_cluster.urls[1]}/{A}/cluster/topics/{ns}"  # the API behind the list, on the other gateway
    answer = httpx.get(rows, params={"order": "asc", "limit": 3}, timeout=10)
    ascending = sorted(real, key=lambda t: (real[t], t))
    assert [r["name"] for r in answer.json()] == ascending[:3]
    assert answer.headers["X-Total-Count"] == str(len(real))
    assert httpx.get(rows, params={"sort": "nope"}, timeout=10).status_code == 400

    page.goto(f"{base}/ui/tenants/{ns}")
    names = page.locator('[data-testid="list-table"] tbody tr[data-row] td:first-child a')
    by_backlog = sorted(real, key=lambda t: (-real[t], t))
    expect(names).to_have_text(by_backlog)  # largest backlog first, unasked
    cells = page.locator('[data-testid="list-table"] tbody td[data-col="msgBacklog"]')
    expect(cells).to_have_text([str(real[t]) for t in by_backlog])
    expect(page.locator('th[aria-sort="descending"] [data-testid="sort-msgBacklog"]')).to_be_visible()
    save_artifact(page, artifacts, "dashboard-topics-by-backlog.png")

    page.locator('[data-testid="sort-msgBacklog"]').click()  # again: smallest first
    expect(names).to_have_text(sorted(real, key=lambda t: (real[t], t)))
    page.locator('[data-testid="sort-name"]').click()
    expect(names).to_have_text(sorted(real))

    page.goto(f"{base}/ui/tenants/public")  # the namespace rows add up their topics
    row = page.locator(f'tr[data-row="{ns.split("/")[1]}"]')
    expect(row.locator('td[data-col="msgBacklog"]')).to_have_text(
        str(sum(v for t, v in real.items() if t != "t-parts"))
    )
    save_artifact(page, artifacts, "dashboard-namespaces.png")
    page.goto(f"{base}/ui/tenants")
    expect(page.locator('tr[data-row="public"] td[data-col="subscriptionCount"]')).not_to_have_text("0")
    save_artifact(page, artifacts, "dashboard-tenants.png")
    assert_clean(dash_cluster, page)


def test_subscriptions_view_shows_lag_and_the_active_failover_consumer(
    dash_cluster: DashCluster, page: Page, artifacts: Path
) -> None:
    base = dash_cluster.urls[1]
    ns = new_namespace(base)
    assert httpx.put(f"{base}/{A}/persistent/{ns}/orders", timeout=10).status_code == 204
    subscribe(base, ns, "orders", "billing")
    sent = publish(base, ns, "orders", 9)
    time.sleep(2.0)  # the oldest unacknowledged message is now at least 2 s old
    with (
        consumer(base, ns, "orders", "audit", subscriptionType="Failover", consumerName="first"),
        consumer(base, ns, "orders", "audit", subscriptionType="Failover", consumerName="second"),
        consumer(base, ns, "orders", "ship", subscriptionType="Key_Shared", consumerName="k1"),
        consumer(base, ns, "orders", "ship", subscriptionType="Key_Shared", consumerName="k2"),
    ):
        page.goto(f"{base}/ui/subscriptions?tenant=public&namespace={ns.split('/')[1]}")
        billing = page.locator('tr[data-sub="billing"]')
        expect(billing.locator('td[data-col="msgBacklog"]')).to_have_text("9")
        lag = billing.locator('td[data-col="lagMs"]')
        expect(lag).to_have_text(re.compile(r"^\d+ s$"))
        seconds = int(lag.inner_text().split()[0])
        assert 2 <= seconds <= time.time() - sent + 6, (seconds, time.time() - sent)
        audit = page.locator('tr[data-sub="audit"]')
        expect(audit).to_contain_text("Failover")
        stats = httpx.get(f"{base}/{A}/persistent/{ns}/orders/stats", timeout=10).json()
        active = stats["subscriptions"]["audit"]["activeConsumerName"]
        assert active in ("first", "second"), stats["subscriptions"]["audit"]
        expect(audit.locator("td").nth(8)).to_have_text(active)
        save_artifact(page, artifacts, "dashboard-subscriptions.png")

        page.goto(f"{base}/ui/topics/persistent/{ns}/orders")  # the topic page says it too
        roles = page.locator('tr[data-sub="audit"] [data-testid="consumer-role"]')
        expect(roles).to_have_count(2)
        expect(
            page.locator('tr[data-sub="audit"] .consumers > div', has_text=active).locator(".badge")
        ).to_have_text("active")
        expect(roles.filter(has_text="standby")).to_have_count(1)
        ranges = page.locator(
            'tr[data-sub="ship"] [data-testid="consumer-ranges"]'
        )  # each Key_Shared consumer's
        expect(ranges).to_have_count(2)
        expect(ranges.first).to_have_text(re.compile(r"^hash ranges \[\d+, \d+\]"))
        save_artifact(page, artifacts, "dashboard-topic-consumers.png")
    assert_clean(dash_cluster, page)


def test_live_tail_reader_is_not_listed(dash_cluster: DashCluster, page: Page) -> None:
    base = dash_cluster.urls[0]
    ns = new_namespace(base)
    assert httpx.put(f"{base}/{A}/persistent/{ns}/tailed", timeout=10).status_code == 204
    subscribe(base, ns, "tailed", "mine")
    page.goto(f"{base}/ui/topics/persistent/{ns}/tailed")
    page.locator('[data-testid="tail-toggle"]').click()
    expect(page.locator('[data-testid="tail-state"]')).to_have_text("live")
    publish(base, ns, "tailed", 2)
    expect(page.locator('[data-testid="tail-count"]')).to_have_text("2")
    subs = httpx.get(f"{base}/{A}/persistent/{ns}/tailed/stats", timeout=10).json()["subscriptions"]
    readers = [name for name, s in subs.items() if not s["isDurable"]]
    assert len(readers) == 1 and readers[0].startswith("folio-dashboard-tail-"), (
        subs
    )  # the stats tell the truth

    expect(page.locator('[data-testid="subs-table"] tr[data-sub]')).to_have_count(1)
    expect(page.locator('tr[data-sub="mine"]')).to_be_visible()
    tail = page.context.new_page()  # the page keeps tailing while another one looks
    tail.goto(f"{base}/ui/subscriptions?tenant=public&namespace={ns.split('/')[1]}")
    expect(tail.locator('[data-testid="subs-view"] tr[data-sub]')).to_have_count(1)
    expect(tail.locator('tr[data-sub="mine"]')).to_be_visible()
    tail.goto(f"{base}/ui/tenants/{ns}")
    expect(tail.locator('tr[data-row="tailed"] td[data-col="subscriptionCount"]')).to_have_text("1")
    tail.close()
    assert_clean(dash_cluster, page)


POLICIES = {  # policy -> (fields to fill, what the admin API reads back)
    "retention": ({"time": "120", "size": "64"}, {"retentionTimeInMinutes": 120, "retentionSizeInMB": 64}),
    "messageTTL": ({"seconds": "300"}, 300),
    "backlogQuota": (
        {"limitSize": "1048576", "limitTime": "-1", "policy": "producer_exception"},
        {"limitSize": 1048576, "limitTime": -1, "policy": "producer_exception"},
    ),
    "deduplication": ({"enabled": "true"}, True),
    "maxConsumersPerSubscription": ({"limit": "4"}, 4),
    "maxProducersPerTopic": ({"limit": "6"}, 6),
    "persistence": (
        {"e": "3", "qw": "2", "qa": "2"},
        {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2},
    ),
    "schemaCompatibilityStrategy": ({"strategy": "BACKWARD"}, "BACKWARD"),
    "isAllowAutoUpdateSchema": ({"allowed": "false"}, False),
    "autoTopicCreation": (
        {"allow": "true", "type": "partitioned", "partitions": "3"},
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3},
    ),
}


def test_every_namespace_policy_set_from_the_page_reads_back(
    dash_cluster: DashCluster, page: Page, artifacts: Path
) -> None:
    base = dash_cluster.urls[0]
    ns = new_namespace(base)
    page.goto(f"{base}/ui/tenants/{ns}")
    expect(page.locator('[data-testid="bundles"]')).to_have_text(re.compile(r"^\d+$"))

    page.locator('[data-testid="policy-edit-persistence"]').click()  # Qa > Qw: refused on the page
    page.locator('[data-testid="policy-persistence-qa"]').fill("3")
    page.locator('[data-testid="policy-persistence-qw"]').fill("2")
    page.locator('[data-testid="policy-set-persistence"]').click()
    expect(page.locator('[data-testid="policy-result"]')).to_contain_text("1 ≤ Qa ≤ Qw ≤ E")
    assert httpx.get(f"{base}/{A}/namespaces/{ns}", timeout=10).json()["persistence"] is None
    page.locator('[data-testid="policy-edit-persistence"]').click()

    for key, (fields, _) in POLICIES.items():
        page.locator(f'[data-testid="policy-edit-{key}"]').click()
        for name, value in fields.items():
            control = page.locator(f'[data-testid="policy-{key}-{name}"]')
            if control.evaluate("e => e.tagName") == "SELECT":
                control.select_option(value)
            else:
                control.fill(value)
        if key == "autoTopicCreation":
            save_artifact(page, artifacts, "dashboard-namespace-policy-edit.png")
        page.locator(f'[data-testid="policy-set-{key}"]').click()
        expect(page.locator('[data-testid="policy-result"]')).to_have_class(re.compile(r"\bgood\b"))
        expect(page.locator(f'[data-testid="policy-set-{key}"]')).to_be_hidden()
    for key, (_, stored) in POLICIES.items():
        got = httpx.get(f"{base}/{A}/namespaces/{ns}/{key}", timeout=10).json()
        if key == "backlogQuota":
            got = httpx.get(f"{base}/{A}/namespaces/{ns}/backlogQuotaMap", timeout=10).json()[
                "destination_storage"
            ]
        if isinstance(stored, dict):
            got = {k: got[k] for k in stored}
        assert got == stored, key
    expect(page.locator('[data-policy="Message TTL"]')).to_have_text("300 s")
    save_artifact(page, artifacts, "dashboard-namespace-policies.png")

    page.locator('[data-testid="policy-reset-messageTTL"]').click()  # reset asks first
    page.locator('[data-testid="confirm-ok"]').click()
    expect(page.locator('[data-policy="Message TTL"]')).to_have_text("none")
    assert httpx.get(f"{base}/{A}/namespaces/{ns}/messageTTL", timeout=10).json() is None
    assert_clean(dash_cluster, page)


def test_delete_asks_first_cancel_keeps_confirm_deletes(dash_cluster: DashCluster, page: Page) -> None:
    base = dash_cluster.urls[0]
    tenant = f"tn{uuid4().hex[:6]}"
    assert httpx.put(f"{base}/{A}/tenants/{tenant}", timeout=10).status_code == 204
    ns = f"{tenant}/gone"
    assert httpx.put(f"{base}/{A}/namespaces/{ns}", timeout=10).status_code == 204
    assert httpx.put(f"{base}/{A}/persistent/{ns}/doomed", timeout=10).status_code == 204
    subscribe(base, ns, "doomed", "s1")
    topics = f"{base}/{A}/persistent/{ns}"

    page.goto(f"{base}/ui/subscriptions?tenant={tenant}")  # a subscription
    page.locator('tr[data-sub="s1"] [data-testid="sub-delete"]').click()
    expect(page.locator('[data-testid="confirm-dialog"]')).to_contain_text("Delete subscription s1")
    page.locator('[data-testid="confirm-ok"]').click()
    expect(page.locator('[data-testid="list-result"]')).to_contain_text("Deleted subscription s1")
    assert httpx.get(f"{topics}/doomed/subscriptions", timeout=10).json() == []

    page.goto(f"{base}/ui/tenants/{ns}")  # a topic: Cancel keeps it
    row = page.locator('tr[data-row="doomed"]')
    row.locator('[data-testid="row-delete"]').click()
    expect(page.locator('[data-testid="confirm-dialog"]')).to_contain_text("Delete topic doomed")
    page.locator('[data-testid="confirm-cancel"]').click()
    expect(page.locator('[data-testid="confirm-dialog"]')).to_be_hidden()
    assert f"persistent://{ns}/doomed" in httpx.get(topics, timeout=10).json()
    expect(row).to_be_visible()
    row.locator('[data-testid="row-delete"]').click()  # Confirm deletes it
    page.locator('[data-testid="confirm-ok"]').click()
    expect(row).to_have_count(0)
    assert httpx.get(topics, timeout=10).json() == []

    assert httpx.put(f"{topics}/also", timeout=10).status_code == 204  # from its own page
    page.goto(f"{base}/ui/topics/persistent/{ns}/also")
    page.locator('[data-testid="topic-delete"]').click()
    page.locator('[data-testid="confirm-cancel"]').click()
    assert httpx.get(f"{topics}/also/stats", timeout=10).status_code == 200
    page.locator('[data-testid="topic-delete"]').click()
    page.locator('[data-testid="confirm-ok"]').click()
    expect(page).to_have_url(f"{base}/ui/tenants/{ns}")
    assert httpx.get(topics, timeout=10).json() == []

    page.goto(f"{base}/ui/tenants/{tenant}")  # the namespace, then the tenant
    page.locator('tr[data-row="gone"] [data-testid="row-delete"]').click()
    page.locator('[data-testid="confirm-ok"]').click()
    expect(page.locator('tr[data-row="gone"]')).to_have_count(0)
    assert httpx.get(f"{base}/{A}/namespaces/{tenant}", timeout=10).json() == []
    page.goto(f"{base}/ui/tenants")
    page.locator('[data-testid="list-search"]').fill(tenant)
    page.locator(f'tr[data-row="{tenant}"] [data-testid="row-delete"]').click()
    page.locator('[data-testid="confirm-ok"]').click()
    expect(page.locator(f'tr[data-row="{tenant}"]')).to_have_count(0)
    assert httpx.get(f"{base}/{A}/tenants/{tenant}", timeout=10).status_code == 404
    assert_clean(dash_cluster, page)


def test_throughput_history_is_there_after_a_reload(
    dash_cluster: DashCluster, page: Page, artifacts: Path, traffic: None
) -> None:
    base = dash_cluster.urls[0]
    deadline = time.monotonic() + 30
    while True:  # the gateways report every 5 s: wait for two reports with traffic in them
        samples = httpx.get(f"{base}/{A}/cluster/throughput", timeout=10).json()["samples"]
        if sum(1 for s in samples if s["msgRateIn"] > 0) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert sum(1 for s in samples if s["msgRateIn"] > 0) >= 2, samples

    page.goto(f"{base}/")
    chart = page.locator('[data-testid="throughput-chart"]')
    expect(chart).to_have_attribute("data-source", "server")
    points = int(chart.get_attribute("data-points") or 0)
    assert points >= len(samples) - 1, (points, len(samples))
    page.reload()  # the history is the gateways', not the page's: all there at once
    expect(chart).to_have_attribute("data-source", "server", timeout=3000)
    assert int(chart.get_attribute("data-points") or 0) >= points
    expect(page.locator('[data-testid="throughput-source"]')).to_contain_text("kept by the gateways")
    save_artifact(page, artifacts, "dashboard-overview-history.png")
    assert_clean(dash_cluster, page)
