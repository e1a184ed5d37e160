"""The dashboard's Spark statistics in a real Chromium: a real cluster and a real
``folio analytics`` service (Spark local[2]) reading the log.

"Run now" from a topic page fills its statistics section while the progress bar
moves; the overview's analytics card lists the topic; a SQL query from the SQL
page shows its rows, its CSV link and its place in the history; no console
errors anywhere. Screenshots of each page go to .folio/artifacts/.
"""

from __future__ import annotations

import base64
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from dashkit import DashCluster, errors_of, save_artifact
from playwright.sync_api import Page, expect

from folio.procs import AnalyticsProcess

TOPIC = "web-stats"
ROWS = [(f"k{i % 7}" if i % 2 else "hot", {"n": i, "text": "p" * (20 + i % 200)}) for i in range(300)]
FIELDS = [{"name": "n", "type": "int"}, {"name": "text", "type": "string"}]
SCHEMA = {"type": "record", "name": "Row", "fields": FIELDS}
VALUE_SCHEMA = orjson.dumps(
    {"name": "", "type": "JSON", "properties": {}, "schema": base64.b64encode(orjson.dumps(SCHEMA)).decode()}
).decode()


@pytest.fixture(scope="module")
def service(dash_cluster: DashCluster) -> Iterator[AnalyticsProcess]:
    base = dash_cluster.urls[0]
    # on demand only, so the first statistics come from the page's button
    assert httpx.put(f"{base}/admin/v2/analytics/settings", json={"intervalSeconds": 0}).status_code == 204
    for low in range(0, len(ROWS), 30):  # ten requests: ten entries, read as several Spark tasks
        messages = [{"payload": orjson.dumps(p).decode(), "key": k} for k, p in ROWS[low : low + 30]]
        body = {"producerName": "web", "valueSchema": VALUE_SCHEMA, "messages": messages}
        reply = httpx.post(f"{base}/topics/persistent/public/default/{TOPIC}", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
    ledgers = dash_cluster.ledgers
    proc = AnalyticsProcess(
        ledgers.root / "analytics",
        ledgers.endpoint,
        namespace=ledgers.namespace,
        master="local[2]",
        log_path=ledgers.root / "analytics.log",
    )
    proc.start(timeout_s=60)
    try:
        assert proc.leader.wait(240), proc.log_tail()
        yield proc
    finally:
        proc.stop()


def test_run_now_fills_the_topic_statistics_with_a_moving_progress_bar(
    dash_cluster: DashCluster, service: AnalyticsProcess, page: Page, artifacts: Path
) -> None:
    base = dash_cluster.urls[0]
    page.goto(f"{base}/ui/topics/persistent/public/default/{TOPIC}")
    section = page.locator('[data-testid="spark-stats"]')
    expect(section).to_contain_text("No statistics for this topic yet")
    page.locator('[data-testid="run-now"]').click()
    seen: list[tuple[str | None, float]] = []  # (run id, or None while queued; bar width %)
    deadline = time.monotonic() + 180
    body = page.locator('[data-testid="stats-body"]')
    # the status text and the bar's width in one evaluation: one consistent state of the page
    # (two round trips could read "run 1 writing" and then the width of the finished run's bar)
    snapshot = """() => {
        const bar = document.querySelector('[data-testid="run-progress-bar"]');
        if (!bar || bar.offsetParent === null) return null;
        return [document.querySelector('[data-testid="run-status"]').innerText, bar.style.width];
    }"""
    while not body.is_visible():
        assert time.monotonic() < deadline, seen
        shown = page.evaluate(snapshot)
        if shown is not None:
            running = re.match(r"run (\d+) ", shown[0])
            width = float(shown[1].rstrip("%"))
            reading = (running.group(1) if running else None, width)
            if not seen or seen[-1] != reading:
                seen.append(reading)
        page.wait_for_timeout(100)
    print(f"progress bar readings (run id, width %): {seen}")
    # one bar per run, from its request (0 %) to its end: it moves forward, never back. A run
    # queued behind it (e.g. the schedule's) starts a bar of its own. The polls (every 100 ms)
    # may miss the reading band on a loaded box - the service's reading progress itself is
    # checked in tests/analytics/test_analytics_service.py
    bars: list[list[float]] = []
    last: str | None = None
    for run, width in seen:
        if not bars or (last is not None and run != last):  # queued readings lead into their run
            bars.append([])
        bars[-1].append(width)
        last = run
    assert bars and len(set(bars[0])) >= 2, seen
    assert all(widths == sorted(widths) for widths in bars), seen
    tiles = page.locator('[data-testid="stats-tiles"] .tile')
    expect(tiles.first).to_contain_text("300")
    expected = Counter(k for k, _ in ROWS)
    top = page.locator('[data-testid="top-keys"] tbody tr')
    expect(top.first).to_contain_text("hot")
    expect(top.first).to_contain_text(str(expected["hot"]))
    expect(page.locator('[data-testid="size-histogram"] .bar-row').first).to_be_visible()
    expect(page.locator('[data-testid="stats-history-chart"] canvas')).to_have_count(1)
    expect(page.locator('[data-testid="stats-producers"] tbody tr')).to_contain_text(["web"])
    fields = page.locator('[data-testid="stats-fields"] tbody tr')
    expect(fields).to_have_count(2)
    expect(fields.first).to_contain_text("n")
    expect(fields.first).to_contain_text("299")  # the field's max
    expect(page.locator('[data-testid="run-status"]')).to_contain_text(
        re.compile(r"last run .* messages read")
    )
    page.wait_for_timeout(1500)
    save_artifact(page, artifacts, "dashboard-topic-statistics.png")
    assert errors_of(page) == [], dash_cluster.server_errors(errors_of(page))


def test_overview_lists_the_analytics_summary(
    dash_cluster: DashCluster, service: AnalyticsProcess, page: Page, artifacts: Path
) -> None:
    page.goto(f"{dash_cluster.urls[1]}/")
    card = page.locator('[data-testid="analytics-overview"]')
    expect(card).to_contain_text(f"persistent://public/default/{TOPIC}")
    expect(page.locator('[data-testid="skewed"]')).to_contain_text("hot key 'hot'")
    page.wait_for_timeout(1500)
    save_artifact(page, artifacts, "dashboard-overview-analytics.png")
    assert errors_of(page) == [], dash_cluster.server_errors(errors_of(page))


def test_a_sql_query_from_the_page_shows_its_rows(
    dash_cluster: DashCluster, service: AnalyticsProcess, page: Page, artifacts: Path
) -> None:
    page.goto(f"{dash_cluster.urls[0]}/")
    page.locator("header nav a", has_text="SQL").click()
    expect(page).to_have_url(f"{dash_cluster.urls[0]}/ui/sql")
    page.locator('[data-testid="sql-query"]').fill(
        f'SELECT key, count(*) AS n FROM "public/default/{TOPIC}" GROUP BY key ORDER BY key'
    )
    page.locator('[data-testid="sql-run"]').click()
    rows = page.locator('[data-testid="sql-rows"] tbody tr')
    expected = sorted(Counter(k for k, _ in ROWS).items())
    answered = page.locator('[data-testid="sql-answer"], [data-testid="sql-error"]').locator("visible=true")
    expect(answered.first).to_be_visible(timeout=120_000)
    assert not page.locator('[data-testid="sql-error"]').is_visible(), (
        page.locator('[data-testid="sql-error"]').inner_text(),
        errors_of(page),
    )
    expect(rows).to_have_count(len(expected))
    expect(rows.first).to_contain_text(expected[0][0])
    expect(rows.first).to_contain_text(str(expected[0][1]))
    href = page.locator('[data-testid="sql-csv"]').get_attribute("href")
    assert href is not None
    csv = httpx.get(f"{dash_cluster.urls[0]}{href}", timeout=30)
    assert csv.status_code == 200 and csv.text.splitlines()[0] == "key,n"
    expect(page.locator('[data-testid="sql-history"] tbody tr').first).to_contain_text("done")
    page.locator('[data-testid="sql-query"]').fill("SELEC broken")
    page.locator('[data-testid="sql-run"]').click()
    expect(page.locator('[data-testid="sql-error"]')).to_contain_text("query failed", timeout=60_000)
    expect(page.locator('[data-testid="sql-answer"]')).to_be_hidden()  # the previous result is gone
    save_artifact(page, artifacts, "dashboard-sql.png")
    # the bad query's 400 is the one console error the page may show (the browser logs failed loads)
    rest = [e for e in errors_of(page) if "/admin/v2/analytics/sql" not in e or "400" not in e]
    assert rest == [], dash_cluster.server_errors(rest)
