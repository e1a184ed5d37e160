"""Helpers of the dashboard browser tests (a module name no other test directory uses).

Owns: ``DashCluster`` (the component tests' ``MessagingCluster``, started from
synchronous code so sync Playwright never runs inside an event loop),
``run_async`` (a coroutine on a helper thread), the Chromium launch settings,
``watch_errors`` (console errors, page errors and every 5xx answer a page
receives; each one fails the test that checks them) and ``save_artifact``
(screenshots to a pytest tmp dir and to .folio/artifacts/).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
from pathlib import Path
from typing import Any

from clusters import LedgerCluster, MessagingCluster
from playwright.sync_api import Page, Response, ViewportSize

from coordination.etcd_store import connect
from folio.procs import GatewayProcess

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / ".folio" / "artifacts"


class DashCluster(MessagingCluster):
    """The component tests' ``MessagingCluster`` (etcd namespace + storage nodes +
    gateways), driven from synchronous code: sync Playwright must never run
    inside an event loop, so every async step runs on a helper thread."""

    @classmethod
    def started(cls, etcd: str, namespace: str, root: Path, nodes: int, gateways: int) -> DashCluster:
        cluster = cls(LedgerCluster(etcd, namespace, root))
        try:
            run_async(cluster.ledgers.add_nodes(nodes))
            for _ in range(gateways):
                cluster.start_gateway()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def start_gateway(self) -> GatewayProcess:
        # the webhook test's endpoint listens on loopback, which webhooks reach only when allow-listed
        gateway: GatewayProcess = run_async(self.add_gateway("--webhook-hosts", "127.0.0.1"))
        return gateway

    def server_errors(self, errors: list[str]) -> str:
        """``errors`` and, when one is a 5xx, the end of every gateway log holding an error record."""
        parts = ["\n".join(errors)]
        if any(e.startswith("server 5") for e in errors):
            for gateway in self.gateways:
                text = gateway.log_text()
                if "Traceback" in text or " ERROR " in text:
                    parts.append(f"--- {gateway.log_path} ({gateway.address}):\n{text[-6000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        for proc in [*self.gateways, *self.ledgers.nodes]:
            with contextlib.suppress(Exception):
                proc.stop()
        run_async(self._forget())

    async def _forget(self) -> None:
        store = await connect(self.ledgers.endpoint, namespace=self.ledgers.namespace)
        try:
            await store.delete_prefix("")
        finally:
            await store.close()


def run_async(coro: Any) -> Any:
    """Run a coroutine to completion on a helper thread (this thread may be inside a loop)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised on the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    if "error" in result:
        raise result["error"]
    return result.get("value")


def watch_errors(page: Page) -> list[str]:
    """Collect ``page``'s console errors, uncaught page errors and 5xx answers.

    Console errors include the browser's "Failed to load resource" for any 4xx/5xx;
    a 5xx is also recorded with its method and URL (a fetch the page handles still
    shows there), so the test names the failing route. The gateway's log is where
    its traceback is (``DashCluster.logs``).
    """
    errors: list[str] = []

    def on_response(response: Response) -> None:
        if response.status >= 500:
            try:  # the gateway's {"reason", "code"}: a typed 500 leaves no traceback in its log
                body = response.text()[:300]
            except Exception as exc:  # the body may be gone; the status still counts
                body = f"(body unavailable: {exc})"
            errors.append(f"server {response.status}: {response.request.method} {response.url} {body}")

    page.on(
        "console",
        lambda msg: (
            errors.append(f"console {msg.type}: {msg.text} @ {msg.location.get('url', '')}")
            if msg.type == "error"
            else None
        ),
    )
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.on("response", on_response)
    return errors


def errors_of(page: Page) -> list[str]:
    return page_errors(page.errors)  # type: ignore[attr-defined]


def page_errors(errors: list[str]) -> list[str]:
    """Every error seen so far (JavaScript errors, failed loads, 4xx and 5xx answers)."""
    return list(errors)


def save_artifact(page: Page, directory: Path, name: str) -> Path:
    """Screenshot ``page`` (full page) into ``directory`` and copy it to .folio/artifacts/."""
    path = directory / name
    page.evaluate("window.scrollTo(0, 0)")  # a sticky header would show mid-page otherwise
    page.screenshot(path=str(path), full_page=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, ARTIFACTS / name)
    return path
