"""The keys of a local cluster: its cluster secret (always) and, for ``folio up --secure``,
the token key and the first token.

Owns: ``SecureSetup``: under ``<data>/security/`` a cluster secret that every
process ``folio up`` starts proves to the storage nodes, in open mode too (a
bare socket to a node is refused: docs/decisions/0017-open-mode-cluster-secret.md),
and with ``--secure`` an HS256 token secret and a superuser token for role
``admin`` (all files 0600, kept across restarts so tokens stay valid); the
flags that use them. Rule: nothing secret is printed, only where it is.
"""

from __future__ import annotations

import os
import secrets
import sys
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

    def prepare_cluster_secret(self) -> None:
        """The storage nodes' cluster secret, made once (open and secure mode)."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.cluster_key.exists():
            _write_private(self.cluster_key, secrets.token_bytes(32))

    def internal_args(self) -> list[str]:
        """The flag of every storage node, auditor and gateway: prove / require the secret."""
        return ["--cluster-secret", str(self.cluster_key)]

    def prepare(self) -> None:
        """Everything ``--secure`` needs: the cluster secret, the token key, the admin token."""
        self.prepare_cluster_secret()
        if not self.token_key.exists():
            _write_private(self.token_key, secrets.token_bytes(32))
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
            "--superuser-roles",
            SUPERUSER,
        ]

    def describe(self, url: str) -> list[str]:
        """The banner's security lines: each example works as printed (tests run them)."""
        bearer = f'-H "Authorization: Bearer $(cat {self.admin_token})"'
        grant = f"{url}/admin/v2/namespaces/public/default/permissions/app"
        return [
            f"security       on: bearer tokens (HS256), superuser role '{SUPERUSER}'",
            f"admin token    {self.admin_token}   (30 days; paste it into the dashboard's Sign in)",
            f"publish        curl {bearer} -d 'hello' {url}/topics/persistent/public/default/demo",
            f"consume        curl {bearer} '{url}/consume/persistent/public/default/demo/sub"
            "?subscriptionInitialPosition=Earliest'",
            f"more tokens    {folio_command()} token create --role app --secret-key {self.token_key}"
            " --expires 1d",
            f"grant          curl {bearer} -H 'Content-Type: application/json'"
            f' -d \'["produce","consume"]\' {grant}',
        ]


def folio_command() -> str:
    """How to run ``folio`` without activating its virtual environment: the script
    beside this interpreter when there is one, else the interpreter with ``-m folio``."""
    script = Path(sys.executable).parent / "folio"
    return str(script) if script.exists() else f"{sys.executable} -m folio"
