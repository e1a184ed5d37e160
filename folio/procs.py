"""Child processes of a local cluster: start, wait for readiness, stop by PID.

Owns: the storage-node, gateway and auditor child processes that ``folio up``
and the component tests start. A node is ready when it prints its READY line (read by
a pump thread, so nothing else on stdout can stall it); it is stopped with
SIGTERM, then SIGKILL. Only processes started here are ever signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
READY_PREFIX = "FOLIO-STORAGE READY "
# a process's READY line: seconds on a quiet box, but a gateway on a box at load 10+ has
# been seen to need more than 30 s to import and start; a wait only ends sooner on failure
START_TIMEOUT_S = 60.0


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
        metrics_port: int = 0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.etcd = etcd
        self.port = port
        self.namespace = namespace
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.metrics_port = metrics_port
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
        cmd += [
            "--data-dir",
            str(self.data_dir),
            "--etcd",
            self.etcd,
            "--metrics-port",
            str(self.metrics_port),
        ]
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
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log, text=True, env=env)
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

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> bool:
        """After ``start(expect_ready=False)``: True once it printed its READY line
        (False if it did not within ``timeout_s`` or exited)."""
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if not self.running() or time.monotonic() > deadline:
                return False
        return True

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

    def stop(self) -> None:
        """Best-effort cleanup for fixtures: SIGTERM, then SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.terminate(10.0)
            except subprocess.TimeoutExpired:
                self.kill9()


GATEWAY_READY_PREFIX = "FOLIO-GATEWAY READY "


class GatewayProcess(NodeProcess):
    """One gateway process (same lifecycle as a node; ``data_dir`` only names its log)."""

    http_url = ""

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "gateway.main", "--port", str(self.port), "--etcd", self.etcd]
        if self.namespace:
            cmd += ["--etcd-namespace", self.namespace]
        return cmd + self.extra_args

    def _pump_stdout(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(GATEWAY_READY_PREFIX):
                fields = dict(part.split("=", 1) for part in line.split()[2:])
                self.http_url = fields["http"]
                self.address = self.http_url.split("://", 1)[1]
                self._ready.set()


ANALYTICS_READY_PREFIX = "FOLIO-ANALYTICS READY "
ANALYTICS_LEADER_PREFIX = "FOLIO-ANALYTICS LEADER "


class AnalyticsProcess(NodeProcess):
    """One ``folio analytics`` service (ready once a candidate; ``leader`` is set once it
    is elected and its Spark session is up). ``data_dir`` only names its log."""

    def __init__(
        self,
        data_dir: Path,
        etcd: str,
        *,
        namespace: str = "",
        master: str = "local[*]",
        log_path: Path | None = None,
        extra_args: Iterable[str] = (),
    ) -> None:
        super().__init__(data_dir, etcd, namespace=namespace, log_path=log_path, extra_args=extra_args)
        self.master = master
        self.service_id = ""
        self.leader = threading.Event()

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "folio_analytics", "--etcd", self.etcd, "--master", self.master]
        if self.namespace:
            cmd += ["--etcd-namespace", self.namespace]
        return cmd + self.extra_args

    def start(self, timeout_s: float = START_TIMEOUT_S, expect_ready: bool = True) -> NodeProcess:
        self.leader.clear()
        self.env.setdefault("PYTHONPATH", str(REPO / "spark"))
        return super().start(timeout_s, expect_ready)

    def _pump_stdout(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(ANALYTICS_READY_PREFIX):
                fields = dict(part.split("=", 1) for part in line.split()[2:] if "=" in part)
                self.service_id = fields.get("id", "")
                self._ready.set()
            elif line.startswith(ANALYTICS_LEADER_PREFIX):
                self.leader.set()


AUDITOR_READY_PREFIX = "FOLIO-AUDITOR READY"


class AuditorProcess(NodeProcess):
    """The auto-recovery auditor child (same lifecycle as a node: READY line read by
    a pump thread, stopped by PID; ``data_dir`` only names its log)."""

    def __init__(
        self,
        etcd: str,
        log_path: Path,
        *,
        grace_ms: int = 30_000,
        namespace: str = "",
        extra_args: Iterable[str] = (),
    ) -> None:
        super().__init__(
            log_path.with_suffix(""), etcd, namespace=namespace, extra_args=extra_args, log_path=log_path
        )
        self.grace_ms = grace_ms

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "storage.auditor", "--etcd", self.etcd, "--grace-ms", str(self.grace_ms)]
        if self.namespace:
            cmd += ["--etcd-namespace", self.namespace]
        return cmd + self.extra_args

    def _pump_stdout(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(AUDITOR_READY_PREFIX):
                fields = dict(part.split("=", 1) for part in line.split()[2:] if "=" in part)
                self.metrics_address = fields.get("metrics", "")
                self._ready.set()
