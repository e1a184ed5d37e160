"""The client of the compose topology: run inside its own namespace, reaches services by name.

Owns: what a user on the compose network does and sees - reads the admin token the
``keys`` service wrote, waits for both gateways and the three storage nodes, is refused
without a token, publishes over REST and consumes over WebSocket through ``gateway1``
and ``gateway2`` (each message published via one gateway reaches the consumers of
both), reaches the gateways through compose's published loopback ports, talks to
``node1:3181`` with and without the cluster-secret proof, loads the dashboard in
Chromium and waits for a statistics run of the analytics service. Rule: it only
observes; it prints one JSON object of what it saw (the test asserts on it), with
``error`` set if a step could not run, and how long each step took.

Usage: python compose_client.py KEYS_DIR GATEWAY[,GATEWAY] NODE [LISTEN=SERVICE:PORT,...]
(the last: compose's published ports, served here as Docker's proxy serves them on the host)
       python compose_client.py --restarted KEYS_DIR GATEWAY[,GATEWAY] NODE  (after NODE was killed)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets
from websockets.exceptions import InvalidStatus

from storage import wire, wire_auth

READY_TIMEOUT_S = 90.0
ANALYTICS_TIMEOUT_S = 200.0  # Spark session start + one run: 45 s on a quiet box, 120 s at load 20
TOPIC = "persistent/public/default/compose-topology"


async def wait_ready(http: httpx.AsyncClient, gateways: list[str], admin: dict[str, str]) -> dict[str, Any]:
    """Until each gateway lists 2 gateways and 3 writable storage nodes (or the timeout)."""
    started = time.monotonic()
    seen: dict[str, Any] = {}
    failure = ""
    while time.monotonic() - started < READY_TIMEOUT_S:
        try:
            for gw in gateways:
                brokers = await http.get(f"http://{gw}/admin/v2/brokers/folio", headers=admin)
                nodes = await http.get(f"http://{gw}/admin/v2/storage/nodes", headers=admin)
                seen[gw] = {"brokers": brokers.status_code, "nodes": nodes.status_code}
                if brokers.status_code == nodes.status_code == 200:
                    seen[gw]["brokers"] = sorted(orjson.loads(brokers.content))
                    seen[gw]["nodes"] = sorted(
                        f"{n['address']} {n['state']}" for n in orjson.loads(nodes.content)
                    )
            if all(
                isinstance(v["brokers"], list)
                and len(v["brokers"]) == 2
                and [n.split()[1] for n in v["nodes"]] == ["writable"] * 3
                for v in seen.values()
            ):
                return {"ready_s": round(time.monotonic() - started, 1), "ready": seen}
        except httpx.HTTPError as exc:
            failure = repr(exc)  # a gateway not listening yet
        await asyncio.sleep(0.5)
    return {"ready_s": None, "ready": seen, "last_failure": failure}


async def publish(http: httpx.AsyncClient, gw: str, payload: bytes, admin: dict[str, str]) -> int:
    """REST publish; a 503 while the topic's first owner is chosen is retried, as a client would."""
    for _ in range(60):
        r = await http.post(f"http://{gw}/topics/{TOPIC}", content=payload, headers=admin)
        if r.status_code != 503:
            return r.status_code
        await asyncio.sleep(0.5)
    return r.status_code


async def cross_gateway(http: httpx.AsyncClient, gateways: list[str], token: str) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {token}"}
    out: dict[str, Any] = {}
    consumers = [
        await websockets.connect(
            f"ws://{gw}/ws/v2/consumer/{TOPIC}/via-{gw.split(':')[0]}?token={token}", open_timeout=30
        )
        for gw in gateways
    ]
    try:
        out["published"] = [
            await publish(http, gw, f"via {gw}".encode(), admin) for gw in gateways
        ]  # one message through each gateway, in order
        got: dict[str, list[str]] = {}
        for gw, ws in zip(gateways, consumers, strict=True):
            payloads = []
            for _ in gateways:
                frame = orjson.loads(await asyncio.wait_for(ws.recv(), 30))
                payloads.append(base64.b64decode(frame["payload"]).decode())
                await ws.send(orjson.dumps({"messageId": frame["messageId"]}).decode())
            got[gw] = payloads
        out["consumed"] = got
    finally:
        for ws in consumers:
            await ws.close()
    return out


async def refusals(http: httpx.AsyncClient, gateways: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"anonymous_rest": {}, "anonymous_ws": {}}
    for gw in gateways:
        out["anonymous_rest"][gw] = (await http.get(f"http://{gw}/admin/v2/tenants")).status_code
        try:
            async with websockets.connect(f"ws://{gw}/ws/v2/consumer/{TOPIC}/anon", open_timeout=30):
                out["anonymous_ws"][gw] = 101
        except InvalidStatus as exc:
            out["anonymous_ws"][gw] = exc.response.status_code
    return out


def node_answers(node: str, secret: bytes | None) -> str:
    """What ``node`` writes back to one NODE_INFO request: 'closed', 'reply' or 'silent'."""
    host, _, port = node.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        if secret is not None:
            sock.sendall(wire_auth.proof(secret, int(time.time() * 1000)))
        sock.sendall(wire.encode_request(wire.Op.NODE_INFO, 1))
        try:
            data = sock.recv(1024)
        except TimeoutError:
            return "silent"
    if not data:
        return "closed"
    return (
        "reply" if len(data) > 5 and data[4] == (wire.Op.NODE_INFO | wire.RESPONSE_BIT) else repr(data[:16])
    )


async def request_analytics(http: httpx.AsyncClient, gw: str, admin: dict[str, str]) -> int:
    r = await http.post(f"http://{gw}/admin/v2/analytics/run", headers=admin)
    assert r.status_code == 202, r.text
    return int(r.json()["runId"]) + (0 if r.json()["state"] == "running" else 1)


async def analytics_result(gw: str, admin: dict[str, str], run_id: int) -> dict[str, Any]:
    """Waits for run ``run_id`` of the analytics service (Spark): what it read of TOPIC."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=30) as http:
        while time.monotonic() - started < ANALYTICS_TIMEOUT_S:
            run = (await http.get(f"http://{gw}/admin/v2/analytics/run", headers=admin)).json()
            if run["state"] == "idle" and run["runId"] >= run_id:
                topic = await http.get(f"http://{gw}/admin/v2/analytics/topics/{TOPIC}", headers=admin)
                return {
                    "leader": run["leader"],
                    "error": run["error"],
                    "read": topic.json()["read"],
                    "waited_s": round((run["startedMs"] - run["requestedMs"]) / 1000, 1),
                    "ran_s": round((run["finishedMs"] - run["startedMs"]) / 1000, 1),
                }
            await asyncio.sleep(1)
        return {"leader": run["leader"], "error": "no run finished", "run": run}


def dashboard(gw: str, token: str) -> dict[str, Any]:
    """The overview page in Chromium, signed in with the admin token: what it shows."""
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))
    args = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-quic"]
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=args)
        try:
            page = browser.new_page()
            page.set_default_timeout(30_000)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            status = page.goto(f"http://{gw}/")
            page.get_by_test_id("token-input").fill(token)
            with page.expect_navigation():
                page.get_by_test_id("sign-in").click()
            errors.clear()  # before sign-in, the page's API calls are refused (401) by design
            gateway_rows = page.locator('[data-testid="gateways"] tr.gw-row')
            states = page.locator('[data-testid="storage-nodes"] .state')
            gateway_rows.nth(1).wait_for()
            states.nth(2).wait_for()
            page.wait_for_function(
                "() => [...document.querySelectorAll('[data-testid=\"storage-nodes\"] .state')]"
                ".every(e => e.textContent.trim() === 'writable')"
            )
            return {
                "status": status.status if status else None,
                "title": page.title(),
                "gateways": gateway_rows.count(),
                "node_states": states.all_inner_texts(),
                "gateway_urls": page.locator('[data-testid="gateways"] tr.gw-row a').all_inner_texts(),
                "errors": errors,
            }
        finally:
            browser.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def published(http: httpx.AsyncClient, ports: dict[str, str], admin: dict[str, str]) -> dict[str, Any]:
    """Each published port as Docker's proxy serves it on the host's loopback (here: the
    client's): the dashboard shell and an admin call, with the Host the browser sends."""
    out: dict[str, Any] = {}
    for listen, target in ports.items():
        host, _, port = listen.rpartition(":")
        to_host, _, to_port = target.rpartition(":")

        async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection(to_host, int(to_port))  # noqa: B023
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

        server = await asyncio.start_server(forward, host, int(port))
        async with server:
            page = await http.get(f"http://{listen}/")
            api = await http.get(f"http://{listen}/admin/v2/brokers/folio", headers=admin)
            out[listen] = [page.status_code, api.status_code]
    return out


async def scenario(keys: Path, gateways: list[str], ports: dict[str, str]) -> dict[str, Any]:
    token = (keys / "admin.token").read_text().strip()
    admin = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=30) as http:
        report = await wait_ready(http, gateways, admin)
        if report["ready_s"] is None:
            return report
        report.update(await refusals(http, gateways))
        report.update(await cross_gateway(http, gateways, token))
        report["analytics_run"] = await request_analytics(http, gateways[0], admin)
        report["published_ports"] = await published(http, ports, admin)
    return report


async def restarted(keys: Path, gateways: list[str], node: str) -> dict[str, Any]:
    """After ``node`` was killed: how long until it answers again (with the proof), and what
    the gateways then list and whether a publish is stored."""
    secret, started = (keys / "cluster.key").read_bytes(), time.monotonic()
    answer = ""
    while time.monotonic() - started < READY_TIMEOUT_S and answer != "reply":
        with contextlib.suppress(OSError):
            answer = await asyncio.to_thread(node_answers, node, secret)
        await asyncio.sleep(0.2)
    report: dict[str, Any] = {"answer": answer, "answered_s": round(time.monotonic() - started, 1)}
    admin = {"Authorization": f"Bearer {(keys / 'admin.token').read_text().strip()}"}
    async with httpx.AsyncClient(timeout=30) as http:
        report.update(await wait_ready(http, gateways, admin))
        report["published"] = await publish(http, gateways[0], b"after the restart", admin)
    return report


def main() -> None:
    if sys.argv[1] == "--restarted":
        print(
            orjson.dumps(
                asyncio.run(restarted(Path(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]))
            ).decode()
        )
        return
    keys, gateways, node = Path(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
    ports = dict(p.split("=") for p in sys.argv[4].split(",") if p)
    report: dict[str, Any] = {}
    timings: dict[str, float] = {}
    started = time.monotonic()

    def lap(step: str) -> None:
        timings[step] = round(time.monotonic() - started - sum(timings.values()), 1)

    try:
        report = asyncio.run(scenario(keys, gateways, ports))
        lap("ready, REST, WebSocket, ports")
        if report.get("ready_s") is not None:
            report["node_without_secret"] = node_answers(node, None)
            report["node_with_secret"] = node_answers(node, (keys / "cluster.key").read_bytes())
            token = (keys / "admin.token").read_text().strip()
            report["dashboard"] = dashboard(gateways[-1], token)
            lap("node, dashboard")
            admin = {"Authorization": f"Bearer {token}"}
            report["analytics"] = asyncio.run(analytics_result(gateways[0], admin, report["analytics_run"]))
            lap("analytics run")
    except Exception as exc:  # reported, so the test shows every step that did run
        report["error"] = repr(exc)
    report["timings"] = timings
    print(orjson.dumps(report).decode())


if __name__ == "__main__":
    main()
