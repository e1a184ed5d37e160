"""``folio up`` in open mode guards the cluster from other local clients (real processes).

No tokens, as a developer runs it; yet:
- every storage node requires the cluster secret ``folio up`` made for itself
  (0600 under ``<data>/security``): a bare socket sending NODE_INFO and FENCE gets
  no answer and is closed, while a client proving the secret (control) is answered,
  and publishing and consuming through the gateways work;
- a webhook aimed at the cluster itself (etcd, a node's wire and metrics ports,
  a gateway, also as the number ``2130706433`` or the name ``localhost``) or at the
  link-local metadata address is 400 naming the rule when it is set, and nothing is
  stored; a webhook to the developer's own loopback endpoint is delivered.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import struct
import time
from pathlib import Path

import httpx
import pytest
from folioup import FolioUp, port_flags
from test_webhook_egress import Listener

from coordination.ports import free_ports
from storage import wire, wire_auth

pytestmark = pytest.mark.component

ADMIN = "/admin/v2/persistent/public/default"


def ask_node_info(port: int, proof: bytes) -> bytes:
    """What the node at ``port`` answers to ``proof`` + NODE_INFO + FENCE of ledger 1."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as conn:
        conn.sendall(
            proof
            + wire.encode_request(wire.Op.NODE_INFO, 1)
            + wire.encode_request(wire.Op.FENCE, 2, struct.pack(">Q", 1))
        )
        return conn.recv(65536)


async def test_open_mode_nodes_and_webhooks(tmp_path: Path) -> None:
    base = free_ports(10, consecutive=True)[0]
    data = tmp_path / "data"
    with FolioUp(tmp_path, "--data", str(data), *port_flags(base), "--no-analytics") as up:
        banner = up.wait_ready()
        key = data / "security" / "cluster.key"
        assert key.stat().st_mode & 0o077 == 0
        assert f"FOLIO_CLUSTER_SECRET_FILE={key}" in banner, banner
        bare = await asyncio.gather(*(asyncio.to_thread(ask_node_info, base + i, b"") for i in (2, 3, 4)))
        assert bare == [b"", b"", b""], "a bare socket was answered"
        answered = ask_node_info(base + 2, wire_auth.proof(key.read_bytes(), int(time.time() * 1000)))
        assert answered[4] == int(wire.Op.NODE_INFO) | 0x80, answered  # the control: the secret works
        url = f"http://127.0.0.1:{base + 8}"
        listener = Listener()
        await listener.start()
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            r = await http.post("/topics/persistent/public/default/guard", content=b"hi")
            assert r.status_code == 200, r.text
            refused = {
                f"http://127.0.0.1:{base}/v3/kv/range": "a port of this cluster",  # etcd
                f"http://localhost:{base + 2}/": "a port of this cluster",  # a node's wire port
                f"http://127.0.0.1:{base + 5}/metrics": "a port of this cluster",  # its metrics
                f"http://127.0.0.1:{base + 9}/admin/v2/tenants": "a port of this cluster",  # a gateway
                f"http://2130706433:{base + 8}/topics/persistent/public/default/x": "a port of this cluster",
                "http://169.254.169.254/latest/meta-data": "link-local",
            }
            for i, (target, rule) in enumerate(refused.items()):
                path = f"{ADMIN}/guard/subscription/s{i}/webhook"
                r = await http.put(path, json={"url": target})
                assert r.status_code == 400, (target, r.text)
                reason = r.json()["reason"]
                assert reason.startswith("url: ") and rule in reason, (target, reason)
                assert (await http.get(path)).status_code == 404, target
            # the developer's own endpoint on loopback: delivered
            hook = {"url": f"http://127.0.0.1:{listener.port}/hook", "initialPosition": "Earliest"}
            path = f"{ADMIN}/guard/subscription/mine/webhook"
            assert (await http.put(path, json=hook)).status_code == 204
            deadline = time.monotonic() + 30
            while listener.requests == 0:
                assert time.monotonic() < deadline, (await http.get(path)).text
                await asyncio.sleep(0.1)
            assert (await http.delete(path)).status_code == 204
            consumed = await http.get(
                "/consume/persistent/public/default/guard/c?subscriptionInitialPosition=Earliest"
            )
            assert consumed.status_code == 200, consumed.text
            payloads = [base64.b64decode(m["payload"]) for m in consumed.json()["messages"]]
            assert payloads == [b"hi"], consumed.text  # read back through a gateway and the nodes
        assert listener.server is not None
        listener.server.close()
        assert up.terminate() == 0
