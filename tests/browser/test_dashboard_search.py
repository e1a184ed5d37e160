"""Message search in the admin API and the dashboard (real Chromium, real etcd + 3
storage nodes + 2 gateways).

Shows: the search page finds a message by key, by JSON field (``dotted.path=value``)
and by publish-time range among messages published in separate batches, and only
that one; the admin API's pages report scanned bytes, entries and messages and a
resume position that, followed, finds the rest without repeating a match, with the
server's caps holding whatever a request asks; a large search shows its progress
and Cancel stops it (no further page is asked for). No console errors; screenshots
of each search are saved (and looked at).
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import orjson
import pytest
from dashkit import DashCluster, errors_of, save_artifact
from playwright.sync_api import Page, Route, expect

pytestmark = pytest.mark.component

A = "admin/v2"


def publish(base: str, ns: str, topic: str, messages: list[dict[str, Any]]) -> None:
    r = httpx.post(f"{base}/topics/persistent/{ns}/{topic}", json={"messages": messages}, timeout=30)
    r.raise_for_status()
    assert all(not x.get("errorCode") for x in r.json()["messagePublishResults"])


def order(i: int, status: str) -> dict[str, Any]:
    return {"payload": orjson.dumps({"order": {"id": i, "status": status}}).decode(), "key": f"cust-{i}"}


def local_time(epoch_s: float) -> str:
    """A datetime-local input's value for ``epoch_s`` (the browser runs in this machine's time zone)."""
    return datetime.fromtimestamp(epoch_s).strftime("%Y-%m-%dT%H:%M:%S")


@pytest.fixture(scope="module")
def orders(dash_cluster: DashCluster) -> tuple[str, str, float, float]:
    """public/sN/orders: 30 orders in three batches over ~3 s; the middle batch's time window."""
    base = dash_cluster.urls[0]
    ns = f"public/s{uuid4().hex[:6]}"
    assert httpx.put(f"{base}/{A}/namespaces/{ns}", timeout=10).status_code == 204
    publish(base, ns, "orders", [order(i, "paid" if i == 7 else "open") for i in range(10)])
    time.sleep(1.5)
    middle_from = time.time()
    publish(base, ns, "orders", [order(i, "open") for i in range(10, 20)])
    middle_to = time.time() + 0.2
    time.sleep(1.5)
    publish(base, ns, "orders", [order(i, "open") for i in range(20, 30)])
    return base, ns, middle_from, middle_to


def search(base: str, ns: str, **params: Any) -> dict[str, Any]:
    r = httpx.get(f"{base}/{A}/persistent/{ns}/orders/search", params=params, timeout=30)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_api_pages_report_progress_and_resume(orders: tuple[str, str, float, float]) -> None:
    base, ns, _, _ = orders
    first = search(base, ns, text="open", limit=4, maxBytes=10**12, timeoutMs=10**9)
    assert first["bounds"] == {"maxBytes": 64 * 1024 * 1024, "timeLimitMs": 10_000, "limit": 4}  # capped
    assert len(first["messages"]) == 4 and first["stoppedBy"] == "matches" and first["next"]
    assert first["scannedBytes"] > 0 and first["scannedEntries"] >= 1 and first["scannedMessages"] >= 4
    seen = [m["position"] for m in first["messages"]]
    start = first["next"]
    while start:
        page = search(base, ns, text="open", limit=7, start=start)
        seen += [m["position"] for m in page["messages"]]
        start = page["next"]
    assert len(seen) == len(set(seen)) == 29  # every "open" order once, none repeated
    bad = httpx.get(f"{base}/{A}/persistent/{ns}/orders/search", params={"json": "order.status"}, timeout=10)
    assert bad.status_code == 400 and "dotted.path=value" in bad.json()["reason"]
    tiny = search(base, ns, maxBytes=1)
    assert (tiny["stoppedBy"], tiny["scannedEntries"]) == ("bytes", 1) and tiny["next"]


def run_search(page: Page, fields: dict[str, str]) -> None:
    for name in ("key", "property", "text", "json", "after", "before"):
        page.get_by_test_id(f"search-{name}").fill(fields.get(name, ""))
    page.get_by_test_id("search-run").click()
    expect(page.get_by_test_id("search-status")).to_contain_text("Done")


def keys_found(page: Page) -> list[str]:
    return page.locator('[data-testid="search-results"] td[data-col="key"]').all_inner_texts()


def test_search_page_finds_by_key_json_and_time(
    dash_cluster: DashCluster, page: Page, artifacts: Path, orders: tuple[str, str, float, float]
) -> None:
    base, ns, middle_from, middle_to = orders
    page.goto(f"{base}/ui/search?topic={ns}/orders")
    expect(page.get_by_test_id("search-topic")).to_have_value(f"{ns}/orders")

    run_search(page, {"key": "cust-12"})
    assert keys_found(page) == ["cust-12"]
    expect(page.get_by_test_id("search-progress")).to_contain_text("30 messages")
    save_artifact(page, artifacts, "dashboard-search-key.png")

    run_search(page, {"json": "order.status=paid"})
    assert keys_found(page) == ["cust-7"]
    expect(page.locator('[data-testid="search-results"] td[data-col="payload"]')).to_contain_text('"paid"')
    save_artifact(page, artifacts, "dashboard-search-json.png")

    run_search(page, {"after": local_time(middle_from), "before": local_time(middle_to + 1)})
    assert keys_found(page) == [f"cust-{i}" for i in range(10, 20)]
    expect(page.get_by_test_id("search-status")).to_contain_text("after the time range")
    save_artifact(page, artifacts, "dashboard-search-time.png")

    errors = errors_of(page)
    assert errors == [], dash_cluster.server_errors(errors)


def test_cancel_stops_a_long_search(
    dash_cluster: DashCluster, page: Page, artifacts: Path, orders: tuple[str, str, float, float]
) -> None:
    base, ns, _, _ = orders
    topic = f"big-{uuid4().hex[:6]}"
    blob = "x" * 60_000
    for _ in range(8):  # ~4.8 MB in 80 entries
        publish(base, ns, topic, [{"payload": blob} for _ in range(10)])
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/search?" in r.url else None)

    def slowly(route: Route) -> None:  # each page reads one entry, slowly: a search that takes a while
        time.sleep(0.3)
        route.continue_(url=route.request.url.replace("maxBytes=8388608", "maxBytes=1"))

    page.route("**/search?*", slowly)
    page.goto(f"{base}/ui/search?topic={ns}/{topic}")
    page.get_by_test_id("search-text").fill("never-there")
    page.get_by_test_id("search-run").click()
    expect(page.get_by_test_id("search-cancel")).to_be_visible()
    expect(page.get_by_test_id("search-progress")).to_contain_text("entries", timeout=10_000)
    expect(page.get_by_test_id("search-progress")).not_to_contain_text(" 0 pages")
    page.get_by_test_id("search-cancel").click()
    expect(page.get_by_test_id("search-status")).to_contain_text("Cancelled")
    count = len(asked)
    time.sleep(1.0)
    assert len(asked) == count, "a page was asked for after Cancel"
    assert count < 80  # stopped long before the end of the log
    expect(page.get_by_test_id("search-resume")).to_be_visible()
    save_artifact(page, artifacts, "dashboard-search-cancelled.png")
    errors = errors_of(page)
    assert errors == [], dash_cluster.server_errors(errors)
