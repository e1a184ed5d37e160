"""The dashboard in a real Chromium against a real cluster (etcd + 3 nodes + 2 gateways).

Shows: every page (``/`` and the pages under ``/ui/``) loads, by its links,
without console errors, page errors or any 5xx answer; a topic created, a
message produced, peeked and live-tailed from the UI; REST-published messages
reach the live tail within 1 s and a burst is counted in full; a topic's schema
versions shown and its Avro messages decoded on the page; a cursor reset
from the UI changes the backlog; dark mode follows the system and the toggle;
a page whose gateway is killed moves to the same page on a live gateway, and
says it lost the cluster when none is left. Screenshots go to .folio/artifacts/.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from dashkit import VIEWPORT, DashCluster, errors_of, page_errors, save_artifact, watch_errors
from playwright.sync_api import Browser, Page, expect
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.component

NS = "public/default"


def topic_url(base: str, topic: str) -> str:
    """The dashboard's topic page (the API's producer owns ``/topics/persistent/…``)."""
    return f"{base}/ui/topics/persistent/{NS}/{topic}"


def create_topic(base: str, topic: str) -> None:
    r = httpx.put(f"{base}/admin/v2/persistent/{NS}/{topic}", timeout=10)
    assert r.status_code in (204, 409), r.text


def publish(base: str, topic: str, payloads: list[str], key: str | None = None) -> list[str]:
    messages = [{"payload": p, **({"key": key} if key else {})} for p in payloads]
    for _ in range(10):  # 503: the topic is moving between gateways (an unload) - retry, as a client does
        r = httpx.post(
            f"{base}/topics/persistent/{NS}/{topic}",
            json={"producerName": "browser-test", "messages": messages},
            timeout=30,
        )
        if r.status_code != 503:
            break
        time.sleep(0.5)
    r.raise_for_status()
    results = r.json()["messagePublishResults"]
    assert all(not x.get("errorCode") for x in results), results
    return [x["messageId"] for x in results]


def subscribe(base: str, topic: str, sub: str) -> None:
    """Create a durable subscription at the earliest position (WS consumer, then leave)."""
    url = base.replace("http://", "ws://") + (
        f"/ws/v2/consumer/persistent/{NS}/{topic}/{sub}?subscriptionInitialPosition=Earliest&pullMode=true"
    )
    with ws_connect(url, open_timeout=10):
        pass


def assert_clean(cluster: DashCluster, errors: list[str]) -> None:
    """No console error, page error or 5xx answer; a 5xx brings the gateways' tracebacks."""
    assert errors == [], cluster.server_errors(errors)


def sub_backlog(page: Page, sub: str) -> str:
    return page.locator(f'tr[data-sub="{sub}"] [data-testid="sub-backlog"]').inner_text()


def test_pages_load_without_console_errors(dash_cluster: DashCluster, page: Page, artifacts: Path) -> None:
    base = dash_cluster.urls[0]
    topic = f"pages-{uuid4().hex[:6]}"
    create_topic(base, topic)
    publish(base, topic, [json.dumps({"n": i}) for i in range(5)])
    subscribe(base, topic, "sub-a")

    response = page.goto(f"{base}/")
    assert response is not None
    csp = response.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "unsafe-eval" not in csp, csp  # Alpine's CSP build
    expect(page.locator('[data-testid="gateways"] tr.gw-row')).to_have_count(2)
    expect(page.locator('[data-testid="storage-nodes"] .state')).to_have_count(3)
    expect(page.locator('[data-testid="storage-nodes"] .state').first).to_have_text("writable")
    expect(page.locator('[data-testid="problems"] .loading')).to_be_hidden()
    expect(page.locator('[data-testid="throughput-chart"] canvas')).to_have_count(1)
    expect(page.locator('[data-testid="served-by"]')).to_have_text(dash_cluster.gateways[0].address)
    count = re.compile(r"^[1-9]\d*$")  # the load reports reach the page: the topic's owner and its ledger
    gateway_topics = page.locator('[data-testid="gateways"] tr.gw-row td:nth-child(3)')
    expect(gateway_topics.filter(has_text=count).first).to_be_visible(timeout=15_000)
    node_ledgers = page.locator('[data-testid="storage-nodes"] tr.node-row td:nth-child(4)')
    expect(node_ledgers.filter(has_text=count)).to_have_count(3, timeout=15_000)
    save_artifact(page, artifacts, "dashboard-overview.png")

    page.locator("header nav a", has_text="Tenants").click()  # every page by its links, under /ui/
    expect(page).to_have_url(f"{base}/ui/tenants")
    page.locator('[data-testid="list-table"] a', has_text="public").click()
    expect(page).to_have_url(f"{base}/ui/tenants/public")
    page.locator('[data-testid="list-table"] a', has_text="default").click()
    expect(page).to_have_url(f"{base}/ui/tenants/public/default")
    page.locator('[data-testid="list-search"]').fill(topic)
    expect(page.locator('[data-testid="list-table"] tbody a')).to_have_text([topic])
    expect(page.locator('[data-testid="list-count"]')).to_have_text("1\u20131 of 1")

    page.locator('[data-testid="list-table"] tbody a').click()
    expect(page).to_have_url(topic_url(base, topic))
    expect(page.locator('tr[data-sub="sub-a"]')).to_be_visible()
    expect(page.locator('[data-testid="ledgers-table"] tbody tr td:first-child').first).to_have_text(
        re.compile(r"^\d+$")
    )
    expect(page.locator('[data-testid="peek-payload"]')).to_have_count(5)
    expect(page.locator('[data-testid="spark-stats"]')).to_contain_text("No statistics for this topic yet")
    page.wait_for_timeout(2500)  # one more refresh round: later polls must be clean too
    save_artifact(page, artifacts, "dashboard-topic.png")
    assert_clean(dash_cluster, errors_of(page))


def test_create_produce_peek_and_tail_from_the_ui(dash_cluster: DashCluster, page: Page) -> None:
    base = dash_cluster.urls[1]
    topic = f"ui-{uuid4().hex[:6]}"
    page.goto(f"{base}/ui/tenants/public/default")
    page.locator('[data-testid="create-name"]').fill(topic)
    page.locator('[data-testid="create-submit"]').click()
    expect(page.locator('[data-testid="create-result"]')).to_contain_text(f"Created topic {topic}")
    r = httpx.get(f"{base}/admin/v2/persistent/{NS}", timeout=10)
    assert f"persistent://{NS}/{topic}" in r.json()

    page.locator('[data-testid="create-link"]').click()
    expect(page).to_have_url(topic_url(base, topic))
    page.locator('[data-testid="tail-toggle"]').click()
    expect(page.locator('[data-testid="tail-state"]')).to_have_text("live")

    page.locator('[data-testid="produce-key"]').fill("k-1")
    page.locator('[data-testid="produce-props"]').fill("source=dashboard\nkind=test")
    page.locator('[data-testid="produce-payload"]').fill('{"hello": "folio", "n": 1}')
    page.locator('[data-testid="produce-send"]').click()
    expect(page.locator('[data-testid="produce-result"]')).to_contain_text("Published as")

    expect(page.locator('[data-testid="tail-count"]')).to_have_text("1")
    expect(page.locator('[data-testid="tail-rows"] tr')).to_have_count(1)
    expect(page.locator('[data-testid="tail-rows"] tr').first).to_contain_text('{"hello": "folio", "n": 1}')
    expect(page.locator('[data-testid="tail-rows"] tr').first).to_contain_text("k-1")

    page.locator('[data-testid="peek-load"]').click()
    row = page.locator(".peek-row").first
    expect(row).to_contain_text("k-1")
    expect(row).to_contain_text("source=dashboard")
    expect(row).to_contain_text("kind=test")
    page.locator('[data-testid="peek-view"]').select_option("json")
    expect(row.locator('[data-testid="peek-payload"]')).to_have_text('{\n  "hello": "folio",\n  "n": 1\n}')
    page.locator('[data-testid="peek-view"]').select_option("hex")
    expect(row.locator('[data-testid="peek-payload"]')).to_contain_text("7b 22 68 65 6c 6c 6f 22")
    assert_clean(dash_cluster, errors_of(page))


def test_topic_schema_and_decoded_messages_on_the_topic_page(dash_cluster: DashCluster, page: Page) -> None:
    """A topic with an AVRO schema: the page lists its versions and shows a version's
    definition, and the message list decodes the Avro payloads by their schema version."""
    base = dash_cluster.urls[0]
    topic = f"schema-{uuid4().hex[:6]}"
    create_topic(base, topic)
    definition = {"type": "record", "name": "Reading", "fields": [{"name": "celsius", "type": "int"}]}
    info = {"type": "AVRO", "schema": base64.b64encode(json.dumps(definition).encode()).decode()}
    body = {"valueSchema": json.dumps(info), "messages": [{"payload": '{"celsius": 21}'}]}
    stored = httpx.post(f"{base}/topics/persistent/{NS}/{topic}", json=body, timeout=10)
    assert stored.status_code == 200 and stored.json()["schemaVersion"] == 0, stored.text

    page.goto(topic_url(base, topic))
    versions = page.locator('[data-testid="schema-versions"] tr.schema-row')
    expect(versions).to_have_count(1)
    expect(versions.first).to_contain_text("AVRO")
    expect(page.locator('[data-testid="schema-definition"]')).to_contain_text('"name": "Reading"')
    row = page.locator(".peek-row").first
    expect(row.locator('[data-testid="peek-payload"]')).to_have_count(1)
    page.locator('[data-testid="peek-view"]').select_option("decoded")
    expect(row.locator('[data-testid="peek-payload"]')).to_have_text('{\n  "celsius": 21\n}')
    assert_clean(dash_cluster, errors_of(page))


def test_rest_messages_reach_the_live_tail_without_loss(dash_cluster: DashCluster, page: Page) -> None:
    base = dash_cluster.urls[0]
    topic = f"tail-{uuid4().hex[:6]}"
    create_topic(base, topic)
    page.goto(topic_url(base, topic))
    page.locator('[data-testid="tail-toggle"]').click()
    expect(page.locator('[data-testid="tail-state"]')).to_have_text("live")
    count = page.locator('[data-testid="tail-count"]')

    publish(dash_cluster.urls[1], topic, ["single"])  # through the other gateway, as curl would
    published = time.monotonic()
    expect(count).to_have_text("1", timeout=5000)
    assert time.monotonic() - published < 1.0, "a REST-published message took over 1 s to show"

    burst = [f"burst-{i:03d}" for i in range(500)]
    publish(base, topic, burst[:250])
    publish(dash_cluster.urls[1], topic, burst[250:])
    expect(count).to_have_text("501", timeout=15_000)
    rows = page.locator('[data-testid="tail-rows"] tr')
    expect(rows).to_have_count(200)  # the DOM keeps the newest 200
    expect(rows.first).to_contain_text("burst-499")
    page.wait_for_timeout(500)
    assert count.inner_text() == "501"  # nothing counted twice

    r = httpx.put(f"{base}/admin/v2/namespaces/{NS}/unload", timeout=30)  # closes the reader
    assert r.status_code == 204, r.text
    publish(dash_cluster.urls[1], topic, [f"after-{i}" for i in range(50)])
    expect(count).to_have_text("551", timeout=15_000)  # the tail resumed where it left off
    expect(rows.first).to_contain_text("after-49")
    assert_clean(dash_cluster, errors_of(page))


def test_cursor_actions_from_the_ui_change_the_backlog(dash_cluster: DashCluster, page: Page) -> None:
    base = dash_cluster.urls[0]
    topic = f"cursor-{uuid4().hex[:6]}"
    create_topic(base, topic)
    subscribe(base, topic, "work")
    # a second cursor at the start: with no retention, a consumed ledger closed by a topic move
    # (the load manager may move it at any time) is trimmed, and no reset brings it back
    subscribe(base, topic, "keep")
    publish(base, topic, [f"m{i}" for i in range(10)])  # one entry: counts are of messages
    page.goto(topic_url(base, topic))
    backlog = page.locator('tr[data-sub="work"] [data-testid="sub-backlog"]')
    expect(backlog).to_have_text("10")

    page.locator('tr[data-sub="work"] [data-testid="sub-actions"]').click()
    page.locator('[data-testid="skip-n"]').fill("3")
    page.locator('[data-testid="do-skip"]').click()
    expect(page.locator('[data-testid="confirm-dialog"]')).to_contain_text("Skip 3 messages")
    page.locator('[data-testid="confirm-ok"]').click()
    expect(page.locator('tr[data-sub="work"] [data-testid="sub-backlog"]')).to_have_text("7")

    page.locator('[data-testid="reset-time-start"]').click()
    page.locator('[data-testid="do-reset-time"]').click()
    page.locator('[data-testid="confirm-ok"]').click()
    expect(page.locator('tr[data-sub="work"] [data-testid="sub-backlog"]')).to_have_text("10")

    page.locator('[data-testid="do-clear"]').click()
    page.locator('[data-testid="confirm-cancel"]').click()  # cancelled: nothing happens
    page.wait_for_timeout(300)
    assert sub_backlog(page, "work") == "10"
    page.locator('[data-testid="do-clear"]').click()
    page.locator('[data-testid="confirm-ok"]').click()
    expect(backlog).to_have_text("0")

    ledger = page.locator('[data-testid="ledgers-table"] tbody tr td:first-child').first.inner_text()
    page.locator('[data-testid="reset-pos"]').fill(f"{ledger}:0")
    page.locator('[data-testid="do-reset-pos"]').click()
    page.locator('[data-testid="confirm-ok"]').click()
    expect(backlog).to_have_text("10")

    page.locator('tr[data-sub="work"] [data-testid="sub-peek"]').click()  # browse the subscription
    expect(page.locator('[data-testid="peek-source"]')).to_have_value("work")
    expect(page.locator('[data-testid="peek-payload"]')).to_have_text([f"m{i}" for i in range(10)])

    page.locator('tr[data-sub="work"] [data-testid="sub-actions"]').click()
    page.locator('[data-testid="do-delete"]').click()
    expect(page.locator('[data-testid="confirm-dialog"]')).to_contain_text("Delete subscription work")
    page.locator('[data-testid="confirm-ok"]').click()
    expect(page.locator('tr[data-sub="work"]')).to_have_count(0)
    assert "work" not in httpx.get(f"{base}/admin/v2/persistent/{NS}/{topic}/stats").json()["subscriptions"]

    publish(base, topic, [f"n{i}" for i in range(15)])  # 25 in all: two pages of 20
    page.locator('[data-testid="peek-source"]').select_option("")
    expect(page.locator('[data-testid="peek-table"]')).to_have_attribute("data-loaded", "|0|0")
    expect(page.locator('[data-testid="peek-payload"]')).to_have_count(20)
    expect(page.locator('[data-testid="peek-payload"]').first).to_have_text("m0")
    page.locator('[data-testid="peek-next"]').click()
    expect(page.locator('[data-testid="peek-table"]')).to_have_attribute("data-loaded", "|0|20")
    expect(page.locator('[data-testid="peek-error"]')).to_be_hidden()
    expect(page.locator('[data-testid="peek-payload"]')).to_have_text([f"n{i}" for i in range(10, 15)])
    expect(page.locator('[data-testid="peek-next"]')).to_be_disabled()
    assert_clean(dash_cluster, errors_of(page))


def test_webhook_from_the_ui_pushes_the_backlog(dash_cluster: DashCluster, page: Page) -> None:
    """Push a subscription to a real HTTP endpoint from the actions panel: the backlog is
    POSTed and acked, the row says where it goes and how it went; stop pushing again."""
    received: list[bytes] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook_url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    base = dash_cluster.urls[0]
    topic = f"hook-{uuid4().hex[:6]}"
    try:
        create_topic(base, topic)
        subscribe(base, topic, "pushed")
        publish(base, topic, [f"h{i}" for i in range(10)])
        page.goto(topic_url(base, topic))
        expect(page.locator('tr[data-sub="pushed"] [data-testid="sub-backlog"]')).to_have_text("10")
        page.locator('tr[data-sub="pushed"] [data-testid="sub-actions"]').click()
        page.locator('[data-testid="hook-url"]').fill("ftp://nowhere")
        page.locator('[data-testid="do-push"]').click()  # refused before any request
        expect(page.locator('[data-testid="action-result"]')).to_contain_text("must start with http")
        page.locator('[data-testid="hook-url"]').fill(hook_url)
        page.locator('[data-testid="do-push"]').click()
        expect(page.locator('[data-testid="confirm-dialog"]')).to_contain_text(f"to {hook_url}")
        page.locator('[data-testid="confirm-ok"]').click()
        expect(page.locator('tr[data-sub="pushed"] [data-testid="sub-backlog"]')).to_have_text("0")
        line = page.locator('tr[data-sub="pushed"] [data-testid="sub-webhook"]')
        expect(line).to_contain_text(f"→ {hook_url} · pushing · 10 acked · 0 failed")
        payloads = [m["payload"] for body in received for m in json.loads(body)["messages"]]
        assert len(payloads) == 10
        expect(page.locator('[data-testid="do-push"]')).to_have_text("Change")
        page.locator('[data-testid="do-stop-push"]').click()
        dialog = page.locator('[data-testid="confirm-dialog"]')
        expect(dialog).to_contain_text("keeps building a backlog")  # a subscription nobody consumes
        page.locator('[data-testid="confirm-ok"]').click()
        expect(dialog).to_contain_text("Delete subscription pushed too?")  # offered at once
        page.locator('[data-testid="confirm-cancel"]').click()
        expect(line).to_be_hidden()
        expect(page.locator('[data-testid="action-result"]')).to_contain_text("keeps building a backlog")
        gone = httpx.get(f"{base}/admin/v2/persistent/{NS}/{topic}/subscription/pushed/webhook", timeout=10)
        assert gone.status_code == 404
        expect(page.locator('tr[data-sub="pushed"]')).to_be_visible()  # kept: Cancel was chosen
        assert_clean(dash_cluster, errors_of(page))
    finally:
        server.shutdown()


def test_partitioned_topic_from_the_ui(dash_cluster: DashCluster, page: Page) -> None:
    base = dash_cluster.urls[0]
    topic = f"parts-{uuid4().hex[:6]}"
    page.goto(f"{base}/ui/tenants/public/default")
    page.locator('[data-testid="create-name"]').fill(topic)
    page.locator('[data-testid="create-partitions"]').fill("3")
    page.locator('[data-testid="create-submit"]').click()
    expect(page.locator('[data-testid="create-result"]')).to_contain_text("with 3 partitions")
    page.locator('[data-testid="list-search"]').fill(
        topic
    )  # the partitioned topic is a row with its partitions
    expect(page.locator(f'tr[data-row="{topic}"] .badge')).to_have_text("partitioned · 3")
    expect(page.locator('[data-testid="list-table"] tbody tr[data-row]')).to_have_count(4)
    assert httpx.get(f"{base}/admin/v2/persistent/{NS}/{topic}/partitions").json() == {"partitions": 3}

    page.locator('[data-testid="create-link"]').click()
    rows = page.locator('[data-testid="partitions-table"] tbody tr')
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text(f"{topic}-partition-0")
    page.locator('[data-testid="tail-toggle"]').click()
    expect(page.locator('[data-testid="tail-state"]')).to_have_text("live")
    publish(dash_cluster.urls[1], topic, [f"p{i}" for i in range(30)])
    expect(page.locator('[data-testid="tail-count"]')).to_have_text("30")
    per_partition = []
    for index in range(3):  # browsed one partition at a time; together they hold all 30
        page.locator('[data-testid="peek-partition"]').select_option(str(index))
        page.locator('[data-testid="peek-load"]').click()  # partition 0 was loaded before the publish
        expect(page.locator('[data-testid="peek-table"]')).to_have_attribute("data-loaded", f"|{index}|0")
        expect(page.locator('[data-testid="peek-error"]')).to_be_hidden()
        per_partition += page.locator('[data-testid="peek-payload"]').all_inner_texts()
    assert sorted(per_partition) == sorted(f"p{i}" for i in range(30))

    rows.first.locator("a").click()
    expect(page.locator('[data-testid="topic-name"]')).to_have_text(f"{NS}/{topic}-partition-0")
    expect(page.locator('[data-testid="ledgers-table"] tbody tr td:first-child').first).to_have_text(
        re.compile(r"^\d+$")
    )
    assert_clean(dash_cluster, errors_of(page))


def test_dark_mode_follows_the_system_and_the_toggle(
    dash_cluster: DashCluster, browser: Browser, artifacts: Path
) -> None:
    base = dash_cluster.urls[0]
    create_topic(base, "dark-shot")

    def background(page: Page) -> str:
        return page.evaluate("getComputedStyle(document.body).backgroundColor")

    light = browser.new_context(viewport=VIEWPORT, color_scheme="light")
    dark = browser.new_context(viewport=VIEWPORT, color_scheme="dark")
    try:
        lp, dp = light.new_page(), dark.new_page()
        lerr, derr = watch_errors(lp), watch_errors(dp)
        lp.goto(f"{base}/ui/tenants")
        dp.goto(f"{base}/ui/tenants")
        light_bg, dark_bg = background(lp), background(dp)
        assert light_bg != dark_bg
        assert _luminance(light_bg) > 0.5 > _luminance(dark_bg)

        lp.locator('[data-testid="theme-toggle"]').click()  # auto -> dark on a light system
        assert background(lp) == dark_bg
        lp.reload()  # saved in localStorage
        assert background(lp) == dark_bg
        lp.locator('[data-testid="theme-toggle"]').click()  # dark -> light
        assert background(lp) == light_bg
        dp.goto(topic_url(base, "dark-shot"))
        dp.locator('[data-testid="tail-toggle"]').click()
        expect(dp.locator('[data-testid="tail-state"]')).to_have_text("live")
        publish(base, "dark-shot", ['{"theme": "dark"}'])
        expect(dp.locator('[data-testid="tail-count"]')).to_have_text("1")
        dp.locator('[data-testid="peek-load"]').click()
        expect(dp.locator('[data-testid="peek-payload"]')).to_have_text(['{"theme": "dark"}'])
        save_artifact(dp, artifacts, "dashboard-topic-dark.png")
        assert_clean(dash_cluster, page_errors(lerr) + page_errors(derr))
    finally:
        light.close()
        dark.close()


def _luminance(css: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", css)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_killed_gateway_page_moves_to_a_live_one_then_reports_lost_cluster(
    dash_cluster: DashCluster, page: Page
) -> None:
    doomed = dash_cluster.start_gateway()  # the page's gateway; the module's two others survive it
    survivors = {g.http_url: g.address for g in dash_cluster.gateways[:2]}
    here = "/ui/tenants/public/default?search=none#topics"  # the same page, query and fragment after the move
    page.goto(f"{doomed.http_url}{here}")
    expect(page.locator('[data-testid="list-count"]')).not_to_have_text("Loading\u2026")
    page.wait_for_function("() => window.Alpine.store('conn').brokers.length >= 3", timeout=15_000)

    doomed.kill9()
    page.wait_for_url(lambda url: any(url.startswith(u) for u in survivors), timeout=20_000)
    moved_to = next(u for u in survivors if page.url.startswith(u))
    assert page.url == f"{moved_to}{here}"
    expect(page.locator('[data-testid="served-by"]')).to_have_text(survivors[moved_to])
    expect(page.locator('[data-testid="conn-banner"]')).to_be_hidden()
    expect(page.locator('[data-testid="list-count"]')).not_to_have_text("Loading\u2026")

    for gateway in dash_cluster.gateways:  # the end of this module's cluster: no gateway left
        if gateway.running():
            gateway.kill9()
    banner = page.locator('[data-testid="conn-banner"]')
    expect(banner).to_contain_text("Lost the cluster", timeout=20_000)
