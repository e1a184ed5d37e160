"""Test helper: run real storage-node processes and talk to them over the wire.

Owns: ``NodeProcess`` (start ``python -m storage.node``, wait for its READY
line, kill -9 / SIGTERM / restart on the same data dir, by PID only) and
``WireClient`` (a tiny blocking client on storage/wire.py that can pipeline).
Reusable by any component test that needs storage nodes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TypeVar

from coordination import keys
from coordination.etcd_store import EtcdStore, connect
from storage import wire
from storage.errors import Status
from storage.types import LedgerMetadata, LedgerState, Segment

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
READY_PREFIX = "FOLIO-STORAGE READY "
START_TIMEOUT_S = 30.0


class NodeProcess:
    """One storage node process. ``port`` 0 on first start = any free port; a
    restart reuses the port it got (the node id is host:port)."""

    def __init__(
        self,
        data_dir: Path,
        etcd: str,
        *,
        port: int = 0,
        namespace: str = "",
        extra_args: Iterable[str] = (),
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.etcd = etcd
        self.port = port
        self.namespace = namespace
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.log_path = log_path or self.data_dir.with_name(self.data_dir.name + ".log")
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""
        self.metrics_address = ""
        self._ready = threading.Event()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.address.rpartition(":")
        return host, int(port)

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "storage.node", "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir), "--etcd", self.etcd, "--metrics-port", "0"]
        if self.namespace:
            cmd += ["--etcd-namespace", self.namespace]
        return cmd + self.extra_args

    def start(self, timeout_s: float = START_TIMEOUT_S, expect_ready: bool = True) -> NodeProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        log = open(self.log_path, "a")  # noqa: SIM115 - handed to the child
        log.write(f"--- start {' '.join(self.command())}\n")
        log.flush()
        self._ready.clear()
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO, env=env
        )
        log.close()
        threading.Thread(target=self._pump_stdout, args=(self.proc,), daemon=True).start()
        if not expect_ready:
            return self
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill9()
                raise RuntimeError(f"node not ready in {timeout_s}s:\n{self.log_tail()}")
        return self

    def _pump_stdout(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(READY_PREFIX):
                fields = dict(part.split("=", 1) for part in line.split()[2:])
                self.address, self.metrics_address = fields["address"], fields["metrics"]
                self.port = self.host_port[1]
                self._ready.set()

    def kill9(self) -> int:
        return self._signal(signal.SIGKILL)

    def terminate(self, timeout_s: float = 20.0) -> int:
        return self._signal(signal.SIGTERM, timeout_s)

    def _signal(self, sig: int, timeout_s: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGUSR1)  # the node dumps its tasks to its log
                time.sleep(0.5)
            raise

    def wait(self, timeout_s: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def restart(self, sig: int = signal.SIGKILL) -> NodeProcess:
        self._signal(sig)
        return self.start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_text()[-chars:]

    def client(self, timeout_s: float = 10.0) -> WireClient:
        return WireClient(*self.host_port, timeout_s=timeout_s)

    def stop(self) -> None:
        """Best-effort cleanup for fixtures: SIGTERM, then SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.terminate(10.0)
            except subprocess.TimeoutExpired:
                self.kill9()


class WireClient:
    """Blocking wire client. ``send`` pipelines; ``recv`` returns responses by id."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = wire.FrameDecoder()
        self._ready: dict[int, wire.Response] = {}
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

    def recv(self, request_id: int) -> wire.Response:
        while request_id not in self._ready:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("node closed the connection")
            for frame in self._decoder.feed(data):
                response = wire.parse_response(frame)
                self._ready[response.request_id] = response
        return self._ready.pop(request_id)

    def call(self, op: int, body: bytes = b"") -> wire.Response:
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
