"""Test helper: run real storage-node processes and talk to them over the wire.

Owns: ``NodeProcess`` (start ``python -m storage.node``, wait for its READY
line, kill -9 / SIGTERM / restart on the same data dir, by PID only) and
``WireClient`` (a tiny blocking client on storage/wire.py that can pipeline).
Reusable by any component test that needs storage nodes.
"""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import NamedTuple, TypeVar

from coordination import keys
from coordination.etcd_store import EtcdStore, connect
from folio.procs import NodeProcess as BaseNodeProcess
from storage import wire
from storage.errors import Status
from storage.types import LedgerMetadata, LedgerState, Segment

T = TypeVar("T")


class NodeProcess(BaseNodeProcess):
    """``folio.procs.NodeProcess`` plus a wire client for tests."""

    def client(self, timeout_s: float = 10.0) -> WireClient:
        return WireClient(*self.host_port, timeout_s=timeout_s)


class Reply(NamedTuple):
    """A node's reply, as the tests read it."""

    op: int
    request_id: int
    status: Status
    body: bytes

    @staticmethod
    def of(frame: wire.Response) -> Reply:
        op, request_id, status, body = frame
        return Reply(op & ~wire.RESPONSE_BIT, request_id, Status(status), body)


class WireClient:
    """Blocking wire client. ``send`` pipelines; ``recv`` returns responses by id."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = wire.FrameDecoder.responses()
        self._ready: dict[int, Reply] = {}
        self._next_id = 1

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, op: int, body: bytes = b"") -> int:
        request_id = self._next_id
        self._next_id += 1
        self.sock.sendall(wire.encode_request(op, request_id, body))
        return request_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, request_id: int) -> Reply:
        while request_id not in self._ready:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("node closed the connection")
            for reply in self._decoder.feed(data):
                response = Reply.of(reply)
                self._ready[response.request_id] = response
        return self._ready.pop(request_id)

    def call(self, op: int, body: bytes = b"") -> Reply:
        return self.recv(self.send(op, body))

    # -- conveniences -------------------------------------------------------------

    def add(self, ledger: int, entry: int, payload: bytes, lac: int = -1, recovery: bool = False) -> Status:
        body = wire.add_body(wire.encode_entry(ledger, entry, lac, payload), recovery)
        return self.call(wire.Op.ADD, body).status

    def add_many(self, ledger: int, entries: Iterable[tuple[int, bytes]]) -> dict[int, Status]:
        """Pipeline adds (lac = entry - 1); returns entry id -> status."""
        ids = {}
        for entry_id, payload in entries:
            body = wire.add_body(wire.encode_entry(ledger, entry_id, entry_id - 1, payload))
            ids[self.send(wire.Op.ADD, body)] = entry_id
        return {ids[rid]: self.recv(rid).status for rid in list(ids)}

    def read(self, ledger: int, entry: int) -> tuple[Status, wire.Entry | None]:
        r = self.call(wire.Op.READ, wire.ledger_entry_body(ledger, entry))
        return r.status, (wire.decode_entry(r.body) if r.status is Status.OK else None)

    def read_range(self, ledger: int, first: int, last: int, max_bytes: int = wire.RANGE_READ_BYTES_MAX):
        r = self.call(wire.Op.READ_RANGE, wire.range_body(ledger, first, last, max_bytes))
        entries = [wire.decode_entry(e) for e in wire.parse_entries(r.body)] if r.status is Status.OK else []
        return r.status, entries

    def fence(self, ledger: int) -> tuple[Status, tuple[int, int] | None]:
        r = self.call(wire.Op.FENCE, wire.ledger_body(ledger))
        return r.status, (wire.parse_lac_reply(r.body) if r.status is Status.OK else None)

    def read_lac(self, ledger: int, previous: int = -1, timeout_ms: int = 0):
        r = self.call(wire.Op.READ_LAC, wire.read_lac_body(ledger, previous, timeout_ms))
        ok = r.status in (Status.OK, Status.TIMEOUT)
        return r.status, (wire.parse_lac_reply(r.body) if ok else None)

    def node_info(self) -> dict[str, object]:
        import orjson

        r = self.call(wire.Op.NODE_INFO)
        assert r.status is Status.OK
        return dict(orjson.loads(r.body))


# ---------------------------------------------------------------- etcd + polling helpers


def etcd_call(endpoint: str, namespace: str, fn: Callable[[EtcdStore], Awaitable[T]]) -> T:
    """Run ``fn(store)`` on a fresh EtcdStore (own event loop) from synchronous test code."""

    async def run() -> T:
        store = await connect(endpoint, namespace=namespace)
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(run())


def put_ledger(endpoint: str, namespace: str, ledger_id: int, ensemble: tuple[str, ...] = ("n:1",)) -> None:
    """Create ledger metadata in etcd: nodes reclaim ledgers that etcd does not know."""
    meta = LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=len(ensemble),
        write_quorum=len(ensemble),
        ack_quorum=1,
        state=LedgerState.OPEN,
        segments=(Segment(0, ensemble),),
    )
    etcd_call(endpoint, namespace, lambda s: s.put(keys.ledger(ledger_id), meta.to_json()))


def delete_ledger(endpoint: str, namespace: str, ledger_id: int) -> None:
    etcd_call(endpoint, namespace, lambda s: s.delete(keys.ledger(ledger_id)))


def node_record(endpoint: str, namespace: str, node_id: str) -> dict[str, object] | None:
    """The NodeInfo JSON a node registered in etcd (None when absent)."""
    import orjson

    kv = etcd_call(endpoint, namespace, lambda s: s.get(keys.node(node_id)))
    return None if kv is None else dict(orjson.loads(kv.value))


def wait_until(condition: Callable[[], object], timeout_s: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


# ---------------------------------------------------------------- node-process test helpers


def payload(ledger: int, entry: int, size: int = 1024) -> bytes:
    """A recognisable entry payload (its ledger and entry id first)."""
    head = f"{ledger}:{entry}:".encode()
    return head + bytes((entry + i) % 251 for i in range(size - len(head)))


def new_node(
    nodes: list[NodeProcess], tmp_path: Path, etcd: str, ns: str, *args: str, **kw: object
) -> NodeProcess:
    """A node process (not started) in ``tmp_path``; ``nodes`` (the fixture) stops it."""
    node = NodeProcess(tmp_path / f"node{len(nodes)}", etcd, namespace=ns, extra_args=args, **kw)  # type: ignore[arg-type]
    nodes.append(node)
    return node


def journal_files(node: NodeProcess) -> list[Path]:
    return sorted((node.data_dir / "journal").glob("*.journal"))


def metrics_text(node: NodeProcess) -> str:
    with urllib.request.urlopen(f"http://{node.metrics_address}/metrics", timeout=5) as response:
        return str(response.read().decode())


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"metric {name} missing")
