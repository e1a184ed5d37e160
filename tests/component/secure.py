"""A secured Folio cluster for component tests: real etcd, storage nodes, gateways with tokens.

Owns: ``SecureCluster`` (token keys in a temp directory, two gateways started
with ``--token-secret-key``, a cluster secret and a superuser role) and
``token()``; tenants ``ta`` (admin role ``admin-a``) and ``tb`` (``admin-b``)
with namespace ``ns`` each, and grants on ``ta/ns``: ``prod`` produce,
``cons`` consume, ``pc`` both.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from clusters import MessagingCluster, started_cluster

from gateway.security.tokens import Algorithm, mint

SUPERUSER = "admin"
ROLES = ("prod", "cons", "pc", "admin-a", "admin-b", SUPERUSER)


@dataclass
class SecureCluster:
    cluster: MessagingCluster
    secret: bytes

    def token(self, role: str, expires_in_s: float | None = 3600) -> str:
        return mint(role, Algorithm.HS256, self.secret, now_s=time.time(), expires_in_s=expires_in_s)

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(role)}"}

    @property
    def urls(self) -> list[str]:
        return self.cluster.urls

    def ws(self, index: int = 0) -> str:
        return self.cluster.ws(index)


_count = 0


@contextlib.asynccontextmanager
async def secure_cluster(etcd_endpoint: str, root: Path, *extra: str) -> AsyncIterator[SecureCluster]:
    global _count
    _count += 1
    secret = os.urandom(32)
    (root / "token.key").write_bytes(secret)
    (root / "cluster.key").write_bytes(os.urandom(32))
    args = (
        "--token-secret-key",
        str(root / "token.key"),
        "--cluster-secret",
        str(root / "cluster.key"),
        "--superuser-roles",
        SUPERUSER,
        *extra,
    )
    namespace = f"/secure-{os.getpid()}-{_count:04d}"
    async with started_cluster(etcd_endpoint, namespace, root, *args) as cluster:
        secure = SecureCluster(cluster, secret)
        su = secure.auth(SUPERUSER)
        async with httpx.AsyncClient(base_url=cluster.urls[0], headers=su, timeout=30) as http:
            for tenant, admin in (("ta", "admin-a"), ("tb", "admin-b")):
                r = await http.put(f"/admin/v2/tenants/{tenant}", json={"adminRoles": [admin]})
                assert r.status_code in (200, 204), r.text
                r = await http.put(f"/admin/v2/namespaces/{tenant}/ns", json={})
                assert r.status_code in (200, 204), r.text
            for role, actions in (
                ("prod", ["produce"]),
                ("cons", ["consume"]),
                ("pc", ["produce", "consume"]),
            ):
                r = await http.post(f"/admin/v2/namespaces/ta/ns/permissions/{role}", json=actions)
                assert r.status_code in (200, 204), r.text
        yield secure
