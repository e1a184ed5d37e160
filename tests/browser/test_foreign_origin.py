"""A web page on a foreign origin cannot reach a Folio gateway, even in open mode on loopback.

Real Chromium, a real cluster (etcd, 3 storage nodes, 1 gateway started open,
with ``--allowed-origins`` naming one page server) and two page servers on
other ports. From the foreign page: a WebSocket never opens, a cross-site form
POST (text/plain) and a no-cors fetch do not set a namespace policy or publish,
an EventSource fails and a read of the API is refused. From the allowed origin
(control): CORS lets the page read stats, set a policy with a preflighted JSON
POST and open a WebSocket.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from dashkit import DashCluster, run_async
from playwright.sync_api import Browser

pytestmark = pytest.mark.component

PAGE = b"<!doctype html><html><body><h1>some site</h1></body></html>"
TTL = "/admin/v2/namespaces/public/default/messageTTL"


class PageServer:
    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(PAGE)))
                self.end_headers()
                self.wfile.write(PAGE)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def sites() -> Iterator[tuple[PageServer, PageServer]]:
    evil, good = PageServer(), PageServer()
    yield evil, good
    evil.server.shutdown()
    good.server.shutdown()


@pytest.fixture(scope="module")
def gateway_url(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory, sites: tuple[PageServer, PageServer]
) -> Iterator[str]:
    cluster = DashCluster.started(etcd_endpoint, "/foreign-origin", tmp_path_factory.mktemp("origin"), 3, 0)
    try:
        run_async(cluster.add_gateway("--allowed-origins", sites[1].origin))
        yield cluster.urls[0]
    finally:
        cluster.stop()


WS_OPENS = """async (url) => await new Promise((done) => {
  const ws = new WebSocket(url);
  ws.onopen = () => { ws.close(); done("open"); };
  ws.onerror = () => done("refused");
  setTimeout(() => done("timeout"), 8000);
})"""
FETCH = """async ([url, init]) => {
  try { const r = await fetch(url, init); return `${r.status} ${r.type} ${await r.text()}`; }
  catch (e) { return "blocked"; }
}"""
EVENT_SOURCE = """async (url) => await new Promise((done) => {
  const es = new EventSource(url);
  es.onopen = () => { es.close(); done("open"); };
  es.onerror = () => { es.close(); done("error"); };
  setTimeout(() => done("timeout"), 8000);
})"""
FORM = """([action, value]) => {
  const f = document.createElement("form");
  f.method = "POST"; f.action = action; f.enctype = "text/plain";
  const i = document.createElement("input"); i.name = value; i.value = ""; f.appendChild(i);
  document.body.appendChild(f); f.submit();
}"""


def ttl(gateway_url: str) -> Any:
    return httpx.get(f"{gateway_url}{TTL}", timeout=10).json()


def test_foreign_page_is_refused_allowed_origin_works(
    browser: Browser, gateway_url: str, sites: tuple[PageServer, PageServer]
) -> None:
    evil, good = sites
    ws_base = gateway_url.replace("http://", "ws://")
    reader = f"{ws_base}/ws/v2/reader/persistent/public/default/origin-t?messageId=earliest"
    before = ttl(gateway_url)
    context = browser.new_context()
    page = context.new_page()
    page.goto(evil.origin + "/")
    assert page.evaluate(WS_OPENS, reader) == "refused"
    read = page.evaluate(FETCH, [f"{gateway_url}/admin/v2/persistent/public/default/origin-t/stats", {}])
    assert read == "blocked"
    no_cors = {"method": "POST", "mode": "no-cors", "body": "7", "headers": {"Content-Type": "text/plain"}}
    assert page.evaluate(FETCH, [f"{gateway_url}{TTL}", no_cors]).startswith("0 opaque")
    stream = f"{gateway_url}/consume/persistent/public/default/origin-t/s/stream"
    assert page.evaluate(EVENT_SOURCE, stream) == "error"
    with page.expect_navigation():
        page.evaluate(FORM, [f"{gateway_url}/topics/persistent/public/default/origin-form", "hello"])
    assert "origin not allowed" in page.content()
    page.goto(evil.origin + "/")
    with page.expect_navigation():
        page.evaluate(FORM, [f"{gateway_url}{TTL}", "9"])
    assert ttl(gateway_url) == before  # no policy was set by either POST
    stats = httpx.get(f"{gateway_url}/admin/v2/persistent/public/default/origin-form/stats", timeout=10)
    assert stats.status_code == 404 or stats.json().get("msgInCounter", 0) == 0, stats.text

    # control: the allowed origin reads with CORS, sets a policy (preflighted JSON) and opens a WebSocket
    page.goto(good.origin + "/")
    assert page.evaluate(WS_OPENS, reader) == "open"
    json_post = {"method": "POST", "body": "7", "headers": {"Content-Type": "application/json"}}
    assert page.evaluate(FETCH, [f"{gateway_url}{TTL}", json_post]).startswith("204 cors")
    assert ttl(gateway_url) == 7
    read = page.evaluate(FETCH, [f"{gateway_url}/admin/v2/namespaces/public/default/messageTTL", {}])
    assert read == "200 cors 7", read
    context.close()
