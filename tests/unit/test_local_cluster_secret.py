"""Which cluster secret a client of the storage nodes proves (``storage.client.connection``):
the file named by FOLIO_CLUSTER_SECRET_FILE; without it, that of a ``folio up`` started in
the current directory with its default data root (``.folio/security/cluster.key``); none
when neither exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.client.connection import SECRET_ENV, ConnectionConfig

pytestmark = pytest.mark.unit


def test_env_first_then_the_local_folio_up_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(SECRET_ENV, raising=False)
    assert ConnectionConfig().auth_secret is None
    local = tmp_path / ".folio" / "security" / "cluster.key"
    local.parent.mkdir(parents=True)
    local.write_bytes(b"L" * 32)
    assert ConnectionConfig().auth_secret == b"L" * 32
    named = tmp_path / "other.key"
    named.write_bytes(b"N" * 32)
    monkeypatch.setenv(SECRET_ENV, str(named))
    assert ConnectionConfig().auth_secret == b"N" * 32
