"""The connector's etcd connect retry, shared by its readers and writer (no etcd, no Spark)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pyspark_folio import logs
from pyspark_folio.options import Connection

from coordination.errors import Unavailable

pytestmark = pytest.mark.unit


def _failing(failures: int, calls: list[str]) -> Any:
    async def connect(endpoint: str, namespace: str = "") -> str:
        calls.append(endpoint)
        if len(calls) <= failures:
            raise Unavailable("etcd unavailable: tcp handshaker shutdown")
        return "store"

    return connect


def test_a_connect_that_times_out_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(logs, "connect", _failing(logs.CONNECT_ATTEMPTS - 1, calls))
    monkeypatch.setattr(logs, "CONNECT_RETRY_S", 0.0)
    assert asyncio.run(logs.connect_store(Connection("127.0.0.1:2379"))) == "store"
    assert len(calls) == logs.CONNECT_ATTEMPTS


def test_the_last_failure_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(logs, "connect", _failing(logs.CONNECT_ATTEMPTS, calls))
    monkeypatch.setattr(logs, "CONNECT_RETRY_S", 0.0)
    with pytest.raises(Unavailable):
        asyncio.run(logs.connect_store(Connection("127.0.0.1:2379")))
    assert len(calls) == logs.CONNECT_ATTEMPTS
