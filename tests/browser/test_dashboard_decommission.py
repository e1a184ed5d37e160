"""The storage-node table's Decommission button in a real Chromium (etcd + 3 nodes + 2 gateways).

Shows: each live node has the button; Cancel in the confirmation leaves the node
alone; Confirm with only three nodes (the ensemble size) is refused by the admin
API and the page says why (add a node first) - no drain record is written, the
node stays writable. The drain itself, with progress, is
tests/component/test_membership_rolling.py.
"""

from __future__ import annotations

import httpx
import pytest
from dashkit import DashCluster
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.component


def test_decommission_button_asks_then_shows_the_refusal(dash_cluster: DashCluster, page: Page) -> None:
    base = dash_cluster.urls[0]
    page.goto(f"{base}/")
    rows = page.locator('[data-testid="storage-nodes"] tr.node-row')
    expect(rows).to_have_count(3)
    buttons = page.locator('[data-testid="storage-nodes"] [data-testid="node-drain"] button')
    expect(buttons).to_have_count(3)
    node_id = rows.first.locator("td").first.inner_text()

    buttons.first.click()
    expect(page.locator('[data-testid="confirm-dialog"]')).to_contain_text(
        f"Decommission storage node {node_id}"
    )
    page.locator('[data-testid="confirm-cancel"]').click()
    assert httpx.get(f"{base}/admin/v2/storage/decommissions").json() == []

    buttons.first.click()
    page.locator('[data-testid="confirm-ok"]').click()
    alert = page.locator('[data-testid="storage-nodes"] p.error')
    expect(alert).to_contain_text("add a node first")
    assert httpx.get(f"{base}/admin/v2/storage/decommissions").json() == []
    expect(rows.first.locator(".state")).to_have_text("writable")
