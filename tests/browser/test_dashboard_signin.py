"""The dashboard with tokens on: sign in, and see only what the role can do (real Chromium).

A cluster whose gateway requires tokens (etcd, 3 storage nodes, 1 gateway):
the dashboard asks for a token; a bad one is not accepted; a consume-only role
on ``ta/ns`` sees the topic page with the tail and peek panels but not the
produce panel, and not the namespace's create-topic form, but the namespace's
topic rows with their figures; its live tail (a WebSocket carrying the token)
shows a message published meanwhile; it sees no Delete button (deleting a
topic needs a tenant admin); a superuser sees the produce panel, the create form
and the Delete buttons of the topic, the topic row and the tenant row; neither
page raises a script error (Alpine's CSP build parses each expression). The token lives in the
tab's sessionStorage (no cookie): signing out forgets it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import httpx
import pytest
from dashkit import DashCluster, run_async, watch_errors
from playwright.sync_api import Browser, Page, expect

from gateway.security.tokens import Algorithm, mint

pytestmark = pytest.mark.component

SECRET = os.urandom(32)


def token(role: str) -> str:
    return mint(role, Algorithm.HS256, SECRET, now_s=time.time(), expires_in_s=3600)


@pytest.fixture(scope="module")
def gateway_url(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("signin")
    (root / "token.key").write_bytes(SECRET)
    cluster = DashCluster.started(etcd_endpoint, f"/signin-{os.getpid()}", root, 3, 0)
    try:
        run_async(
            cluster.add_gateway("--token-secret-key", str(root / "token.key"), "--superuser-roles", "admin")
        )
        url = cluster.urls[0]
        admin = {"Authorization": f"Bearer {token('admin')}"}
        with httpx.Client(base_url=url, headers=admin, timeout=30) as http:
            assert http.put("/admin/v2/tenants/ta", json={"adminRoles": []}).status_code == 204
            assert http.put("/admin/v2/namespaces/ta/ns", json={}).status_code == 204
            r = http.post("/admin/v2/namespaces/ta/ns/permissions/reader", json=["consume"])
            assert r.status_code == 204
            r = http.post("/topics/persistent/ta/ns/t", json={"messages": [{"payload": "Zmlyc3Q="}]})
            assert r.status_code == 200
        yield url
    finally:
        cluster.stop()


def sign_in(page: Page, url: str, value: str, accepted: bool = True) -> None:
    """Sign in from the overview; an accepted token reloads the page, awaited here so
    that the test's next navigation does not race the reload."""
    page.goto(f"{url}/")
    page.get_by_test_id("token-input").fill(value)
    if not accepted:
        page.get_by_test_id("sign-in").click()
        return
    with page.expect_navigation():
        page.get_by_test_id("sign-in").click()


def test_sign_in_and_see_only_what_the_role_can_do(browser: Browser, gateway_url: str) -> None:
    context = browser.new_context()
    page = context.new_page()
    errors = watch_errors(page)
    page.goto(f"{gateway_url}/")
    expect(page.get_by_test_id("token-input")).to_be_visible()
    sign_in(page, gateway_url, "not-a-token", accepted=False)
    expect(page.get_by_text("that token was not accepted")).to_be_visible()

    sign_in(page, gateway_url, token("reader"))
    expect(page.get_by_test_id("signed-role")).to_have_text("reader")
    page.goto(f"{gateway_url}/ui/topics/persistent/ta/ns/t")
    expect(page.get_by_test_id("tail")).to_be_visible()
    expect(page.get_by_test_id("peek")).to_be_visible()
    expect(page.get_by_test_id("produce")).to_be_hidden()
    expect(page.get_by_test_id("topic-delete")).to_be_hidden()
    page.get_by_test_id("tail-toggle").click()
    # "live" once its WebSocket is open: the gateway creates the reader (at latest) before it accepts
    expect(page.get_by_test_id("tail-state")).to_have_text("live")
    admin = {"Authorization": f"Bearer {token('admin')}"}
    body = {"messages": [{"payload": "tailed-with-a-token"}]}
    assert httpx.post(f"{gateway_url}/topics/persistent/ta/ns/t", json=body, headers=admin).status_code == 200
    expect(page.get_by_test_id("tail")).to_contain_text("tailed-with-a-token", timeout=15_000)
    page.goto(f"{gateway_url}/ui/tenants/ta/ns")
    expect(page.locator("section[data-needs=admin]").first).to_be_hidden()
    # the topic rows need what the topic list needs (consume here): shown with their figures
    expect(page.locator('tr[data-row="t"] td[data-col="subscriptionCount"]')).to_have_text("0")
    expect(page.locator('tr[data-row="t"] td[data-col="storageSize"]')).not_to_have_text("0 B")
    expect(page.get_by_test_id("row-delete")).to_have_count(1)  # the row is there, its button hidden
    expect(page.get_by_test_id("row-delete")).to_be_hidden()

    page.get_by_test_id("sign-out").click()
    expect(page.get_by_test_id("token-input")).to_be_visible()
    sign_in(page, gateway_url, token("admin"))
    expect(page.get_by_test_id("signed-role")).to_have_text("admin")
    page.goto(f"{gateway_url}/ui/topics/persistent/ta/ns/t")
    expect(page.get_by_test_id("produce")).to_be_visible()
    expect(page.get_by_test_id("topic-delete")).to_be_visible()
    page.goto(f"{gateway_url}/ui/tenants/ta/ns")
    expect(page.locator("section[data-needs=admin]").first).to_be_visible()
    expect(page.locator('tr[data-row="t"] [data-testid="row-delete"]')).to_be_visible()
    page.goto(f"{gateway_url}/ui/tenants")
    expect(page.locator('tr[data-row="ta"] [data-testid="row-delete"]')).to_be_visible()
    scripts = [e for e in errors if "Failed to load resource" not in e]
    assert not scripts, "\n".join(scripts)
    context.close()
