"""``folio up --secure``: the keys and the first token of a local cluster with authentication.

Owns: ``SecureSetup``: under ``<data>/security/`` an HS256 token secret, a
cluster secret shared by the gateways, and a superuser token for role
``admin`` (all files 0600, kept across restarts so tokens stay valid); the
gateway flags that use them. Rule: nothing secret is printed, only where it is.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.security.tokens import Algorithm, mint

SUPERUSER = "admin"
ADMIN_TOKEN_S = 30 * 86400


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


@dataclass(frozen=True)
class SecureSetup:
    directory: Path

    @property
    def token_key(self) -> Path:
        return self.directory / "token.key"

    @property
    def cluster_key(self) -> Path:
        return self.directory / "cluster.key"

    @property
    def admin_token(self) -> Path:
        return self.directory / "admin.token"

    def prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        for key in (self.token_key, self.cluster_key):
            if not key.exists():
                _write_private(key, secrets.token_bytes(32))
        token = mint(
            SUPERUSER,
            Algorithm.HS256,
            self.token_key.read_bytes(),
            now_s=time.time(),
            expires_in_s=ADMIN_TOKEN_S,
        )
        _write_private(self.admin_token, token.encode() + b"\n")

    def gateway_args(self) -> list[str]:
        return [
            "--token-secret-key",
            str(self.token_key),
            "--cluster-secret",
            str(self.cluster_key),
            "--superuser-roles",
            SUPERUSER,
        ]

    def describe(self) -> list[str]:
        return [
            f"security       on: bearer tokens (HS256), superuser role '{SUPERUSER}';"
            " storage nodes accept only peers that prove the cluster secret",
            f"admin token    {self.admin_token}   (30 days)",
            f'use it         curl -H "Authorization: Bearer $(cat {self.admin_token})" …',
            f"more tokens    folio token create --role R --secret-key {self.token_key} --expires 1d",
        ]
