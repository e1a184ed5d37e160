"""``folio up --secure`` end to end: real etcd, storage nodes, auditor and gateways with tokens.

The banner says security is on and where the admin token is; without a token the
admin API answers 401, with the admin token it works; a token made with
``folio token create`` for a role granted ``produce`` publishes over REST and one
granted ``consume`` reads it over a WebSocket with ``?token=``; the produce-only
role is refused the WebSocket consumer (403); the storage nodes close a
connection that does not prove the cluster secret (the gateways do prove it:
the publish went through them). The banner's examples work as printed, run by a
shell whose PATH has no virtual environment: the grant, a publish and a consume
with the admin token, and the token command by the venv's own path.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest
import websockets
from folioup import FolioUp, port_flags
from websockets.exceptions import InvalidStatus

from coordination.ports import free_ports
from storage import wire

pytestmark = pytest.mark.component


async def test_folio_up_secure(tmp_path: Path) -> None:
    base = free_ports(10, consecutive=True)[0]
    data = tmp_path / "data"
    with FolioUp(tmp_path, "--secure", "--data", str(data), *port_flags(base)) as up:
        banner = up.wait_ready()
        token_file = data / "security" / "admin.token"
        assert "security       on: bearer tokens" in banner and str(token_file) in banner, banner
        assert "OFF" not in banner
        assert token_file.stat().st_mode & 0o077 == 0
        admin = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
        examples = {line[:15].strip(): line[15:].strip() for line in banner.splitlines()}
        plain = {**up.env, "PATH": "/usr/bin:/bin"}  # no virtual environment activated
        for label in ("grant", "publish", "consume", "more tokens"):
            assert label in examples, banner
            command = f"{examples[label]} --fail-with-body" if "curl" in examples[label] else examples[label]
            done = await asyncio.to_thread(
                subprocess.run, ["bash", "-c", command], capture_output=True, text=True, env=plain, timeout=60
            )
            assert done.returncode == 0, (label, examples[label], done.stdout, done.stderr)
            if label == "consume":
                assert "aGVsbG8=" in done.stdout, done.stdout  # "hello", as the publish sent it
            if label == "more tokens":
                assert done.stdout.count(".") == 2, done.stdout  # a JWT
        url, ws = f"http://127.0.0.1:{base + 8}", f"ws://127.0.0.1:{base + 9}"
        key = str(data / "security" / "token.key")
        made = [
            up.run("token", "create", "--role", role, "--secret-key", key, *expires)
            for role, expires in (("writer", ["--expires", "1h"]), ("reader", []))
        ]
        assert all(done.returncode == 0 for done in made), [done.stderr for done in made]
        writer, reader = (done.stdout.strip() for done in made)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            assert (await http.get("/admin/v2/tenants")).status_code == 401
            assert (await http.get("/admin/v2/tenants", headers=admin)).status_code == 200
            for role, actions in (("writer", ["produce"]), ("reader", ["consume"])):
                r = await http.post(
                    f"/admin/v2/namespaces/public/default/permissions/{role}", json=actions, headers=admin
                )
                assert r.status_code == 204, r.text
            async with websockets.connect(
                f"{ws}/ws/v2/consumer/persistent/public/default/up/s?token={reader}", open_timeout=30
            ) as consumer:
                r = await http.post(
                    "/topics/persistent/public/default/up",
                    content=b"hello",
                    headers={"Authorization": f"Bearer {writer}"},
                )
                assert r.status_code == 200, r.text
                frame = orjson.loads(await consumer.recv())
                assert base64.b64decode(frame["payload"]) == b"hello"
            with pytest.raises(InvalidStatus) as refused:
                async with websockets.connect(
                    f"{ws}/ws/v2/consumer/persistent/public/default/up/s?token={writer}"
                ):
                    pass
            assert refused.value.response.status_code == 403
        # a storage node answers nothing to a peer without the cluster secret
        with socket.create_connection(("127.0.0.1", base + 2), timeout=15) as plain:
            plain.sendall(wire.encode_request(wire.Op.NODE_INFO, 1))
            assert plain.recv(1024) == b""
        assert up.terminate() == 0
