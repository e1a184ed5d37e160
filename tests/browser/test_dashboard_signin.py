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

The anonymous overview says where a token comes from and signs in from its own
form; "Run now" is hidden until a superuser signs in; the analytics card says to
sign in instead of a bare 401. The roles-and-grants page (in the menu for
superusers and tenant admins only) shows a tenant admin its namespace's grants,
grants produce on the namespace and consume on one topic, and revokes, each
checked through the admin API; a role without admin rights sees no menu entry and
a sentence saying why. Screenshots of both pages are saved (.folio/artifacts/).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dashkit import DashCluster, run_async, save_artifact, watch_errors
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
    expect(page.get_by_test_id("signin").get_by_text("that token was not accepted")).to_be_visible()

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


def anonymous_noise(errors: list[str]) -> list[str]:
    """The errors but the browser's log lines of the 401s an anonymous page is answered."""
    return [e for e in errors if not ("Failed to load resource" in e and "401" in e)]


def test_anonymous_page_explains_tokens_and_signs_in(
    browser: Browser, gateway_url: str, artifacts: Path
) -> None:
    context = browser.new_context()
    page = context.new_page()
    errors = watch_errors(page)
    page.goto(f"{gateway_url}/")
    notice = page.get_by_test_id("signin-notice")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("security/admin.token")
    expect(notice).to_contain_text("folio token create --role ROLE")
    expect(page.get_by_test_id("overview-run-now")).to_be_hidden()
    expect(page.get_by_test_id("nav-grants")).to_be_hidden()
    expect(page.get_by_test_id("analytics-overview")).to_contain_text("sign in with a token")
    save_artifact(page, artifacts, "signin-anonymous.png")
    assert not anonymous_noise(errors), "\n".join(errors)

    page.get_by_test_id("notice-token-input").fill(token("admin"))
    with page.expect_navigation():
        page.get_by_test_id("notice-sign-in").click()
    expect(page.get_by_test_id("signed-role")).to_have_text("admin")
    expect(notice).to_be_hidden()
    expect(page.get_by_test_id("overview-run-now")).to_be_visible()
    expect(page.get_by_test_id("nav-grants")).to_be_visible()
    errors.clear()
    page.reload()
    expect(page.get_by_test_id("signed-role")).to_have_text("admin")
    expect(page.get_by_test_id("overview-run-now")).to_be_visible()
    assert not errors, "\n".join(errors)
    context.close()


def test_grants_page_grants_and_revokes(browser: Browser, gateway_url: str, artifacts: Path) -> None:
    admin = {"Authorization": f"Bearer {token('admin')}"}
    with httpx.Client(base_url=gateway_url, headers=admin, timeout=30) as http:
        assert http.put("/admin/v2/tenants/tg", json={"adminRoles": ["admin-g"]}).status_code == 204
        assert http.put("/admin/v2/namespaces/tg/ns", json={}).status_code == 204
        r = http.post("/admin/v2/namespaces/tg/ns/permissions/reader", json=["consume"])
        assert r.status_code == 204

        context = browser.new_context()
        page = context.new_page()
        errors = watch_errors(page)
        # a role that administers nothing: no menu entry, and the page says why
        sign_in(page, gateway_url, token("reader"))
        expect(page.get_by_test_id("nav-grants")).to_be_hidden()
        page.goto(f"{gateway_url}/ui/grants")
        expect(page.get_by_test_id("grants-none")).to_be_visible()
        page.get_by_test_id("sign-out").click()

        sign_in(page, gateway_url, token("admin-g"))
        expect(page.get_by_test_id("nav-grants")).to_be_visible()
        page.get_by_test_id("nav-grants").click()
        expect(page.get_by_test_id("grants-namespace")).to_have_value("tg/ns")
        expect(page.get_by_test_id("grants-admins")).to_have_text("admin-g")
        table = page.get_by_test_id("grants-namespace-table")
        expect(table.locator('tr[data-role="reader"]')).to_contain_text("consume")

        page.get_by_test_id("grant-role").fill("writer")
        page.get_by_test_id("grant-submit").click()  # produce is ticked by default
        expect(page.get_by_test_id("grants-result")).to_have_text("Granted produce to writer on tg/ns.")
        expect(table.locator('tr[data-role="writer"]')).to_contain_text("produce")
        assert http.get("/admin/v2/namespaces/tg/ns/permissions").json()["writer"] == ["produce"]

        page.get_by_test_id("grant-role").fill("auditor")
        page.get_by_test_id("grant-produce").uncheck()
        page.get_by_test_id("grant-consume").check()
        page.get_by_test_id("grant-topic").fill("orders")
        page.get_by_test_id("grant-submit").click()
        topics = page.get_by_test_id("grants-topic-table")
        expect(topics.locator('tr[data-role="auditor"][data-topic="orders"]')).to_contain_text("consume")
        grants = http.get("/admin/v2/persistent/tg/ns/orders/permissions").json()
        assert grants["auditor"] == ["consume"] and grants["reader"] == ["consume"], grants
        save_artifact(page, artifacts, "grants-page.png")

        table.locator('tr[data-role="writer"]').get_by_test_id("grant-revoke").click()
        page.get_by_test_id("confirm-ok").click()
        expect(table.locator('tr[data-role="writer"]')).to_have_count(0)
        assert "writer" not in http.get("/admin/v2/namespaces/tg/ns/permissions").json()
        topics.locator('tr[data-role="auditor"]').get_by_test_id("grant-revoke").click()
        page.get_by_test_id("confirm-ok").click()
        expect(topics.locator('tr[data-role="auditor"]')).to_have_count(0)
        assert "auditor" not in http.get("/admin/v2/persistent/tg/ns/orders/permissions").json()
        # a refused call reads as a sentence, not a bare status
        page.get_by_test_id("grant-role").fill("auditor")
        page.get_by_test_id("grant-topic").fill("orders-partition-0")  # a partition's own name: 412
        page.get_by_test_id("grant-submit").click()
        expect(page.get_by_test_id("grants-result")).to_contain_text("Grant: 412: grant permissions on")
        scripts = [e for e in errors if "Failed to load resource" not in e]
        assert not scripts, "\n".join(scripts)
        context.close()
