"""The storage nodes' cluster-secret proof (pure): valid once, nothing else passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.client.connection import SECRET_ENV, ConnectionConfig
from storage.wire import PROOF_BYTES
from storage.wire_auth import WINDOW_MS, ProofChecker, proof

pytestmark = pytest.mark.unit

SECRET = b"s" * 32
NOW = 1_800_000_000_000


def test_a_valid_proof_passes_once() -> None:
    checker = ProofChecker(SECRET)
    data = proof(SECRET, NOW)
    assert len(data) == PROOF_BYTES
    assert checker.check(data, NOW + 5)
    assert not checker.check(data, NOW + 6)  # replayed
    assert checker.check(proof(SECRET, NOW), NOW)  # a fresh nonce


def test_wrong_secret_stale_truncated_or_tampered_proofs_fail() -> None:
    checker = ProofChecker(SECRET)
    assert not checker.check(proof(b"x" * 32, NOW), NOW)
    assert not checker.check(proof(SECRET, NOW - WINDOW_MS - 1), NOW)
    assert not checker.check(proof(SECRET, NOW + WINDOW_MS + 1), NOW)
    assert not checker.check(proof(SECRET, NOW)[:-1], NOW)
    good = bytearray(proof(SECRET, NOW))
    good[10] ^= 1
    assert not checker.check(bytes(good), NOW)
    assert not checker.check(b"\x00" * PROOF_BYTES, NOW)


def test_clients_take_the_secret_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cluster.key").write_bytes(SECRET)
    assert ConnectionConfig().auth_secret is None
    monkeypatch.setenv(SECRET_ENV, str(tmp_path / "cluster.key"))
    assert ConnectionConfig().auth_secret == SECRET  # Spark jobs and tools started with it prove it
