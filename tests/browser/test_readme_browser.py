"""The README's browser consumer, pasted into the dashboard's console in Chromium.

A fresh cluster (etcd, 3 storage nodes, 2 gateways); the README's step 1 is run
as pasted (curl publishes three messages, fetches and acks them on another
subscription); then the dashboard is opened and step 2's snippet evaluated in
the page, as a console would: it logs the three messages, in order, with their
properties; a message published afterwards (step 1's first command again)
arrives too, and the snippet's acks leave the ``browser`` subscription with no
backlog. No console errors.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from dashkit import DashCluster
from pasted import code_block, run_pasted
from playwright.sync_api import ConsoleMessage, Page

pytestmark = pytest.mark.component

STATS = "/admin/v2/persistent/public/default/tour/stats"


def wait_for(page: Page, received: list[str], count: int) -> None:
    deadline = time.monotonic() + 20
    while len(received) < count and time.monotonic() < deadline:
        page.wait_for_timeout(100)  # Playwright delivers console events while it waits
    assert len(received) >= count, received


def test_the_readme_browser_consumer_receives_and_acks(
    dash_cluster: DashCluster, page: Page, tmp_path: Path
) -> None:
    step_one = code_block("### 1. Publish and consume with curl")
    run_pasted(dash_cluster.urls, step_one, tmp_path, 60)
    received: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.text.startswith("received "):
            received.append(message.text)

    page.on("console", on_console)
    page.goto(dash_cluster.urls[0] + "/")
    snippet = code_block("### 2. A consumer in the browser", "js")
    page.evaluate("() => {\n" + snippet + "\n}")  # what a console does with the pasted lines
    wait_for(page, received, 3)
    assert [r.split(" ", 2)[1] for r in received[:3]] == ["hello,", "second", "third"], received
    assert received[0].startswith("received hello, folio"), received

    first_curl = step_one.split("\n# publish several", 1)[0]
    run_pasted(dash_cluster.urls, first_curl, tmp_path, 60)
    wait_for(page, received, 4)
    assert received[3].startswith("received hello, folio"), received

    with httpx.Client(base_url=dash_cluster.urls[1], timeout=10) as http:
        deadline = time.monotonic() + 20
        while True:
            browser = http.get(STATS).json()["subscriptions"]["browser"]
            if browser["msgBacklog"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert browser["msgBacklog"] == 0 and len(browser["consumers"]) == 1, browser
    assert page.errors == [], page.errors  # type: ignore[attr-defined]
