"""Child processes of a local cluster: start, wait for readiness, stop by PID.

Owns: the storage-node child processes that ``folio up`` (and the component
test harness) starts. A child is ready when it prints its READY line; it is
stopped with SIGTERM, then SIGKILL after a grace period. Only processes this
module started are ever signalled.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

READY_PREFIX = "FOLIO-STORAGE READY"
READY_TIMEOUT_S = 30.0


@dataclass
class NodeProcess:
    port: int
    data_dir: Path
    etcd: str
    metrics_port: int = 0
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    process: subprocess.Popen[str] | None = None
    address: str = ""
    metrics_address: str = ""

    @property
    def node_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable,
            "-m",
            "storage.node",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--etcd",
            self.etcd,
            "--metrics-port",
            str(self.metrics_port),
            *self.extra_args,
        ]
        log_path = self.log_path or self.data_dir.parent / f"node-{self.port}.log"
        stderr = open(log_path, "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, **self.env},
        )
        stderr.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        try:
            while time.monotonic() < deadline:
                if not selector.select(timeout=0.2):
                    if self.process.poll() is not None:
                        raise RuntimeError(f"storage node {self.port} exited with {self.process.returncode}")
                    continue
                line = self.process.stdout.readline()
                if not line:
                    raise RuntimeError(f"storage node {self.port} closed stdout before READY")
                if line.startswith(READY_PREFIX):
                    fields = dict(part.split("=", 1) for part in line.split()[2:] if "=" in part)
                    self.address = fields.get("address", self.node_id)
                    self.metrics_address = fields.get("metrics", "")
                    return
        finally:
            selector.close()
        raise RuntimeError(f"storage node {self.port} not ready after {READY_TIMEOUT_S}s")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> None:
        if self.alive():
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self, grace_s: float = 10.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


AUDITOR_READY_PREFIX = "FOLIO-AUDITOR READY"


@dataclass
class AuditorProcess:
    """The auto-recovery auditor child of a local cluster."""

    etcd: str
    log_path: Path
    grace_ms: int = 30_000
    process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        args = [
            sys.executable,
            "-m",
            "storage.auditor",
            "--etcd",
            self.etcd,
            "--grace-ms",
            str(self.grace_ms),
        ]
        stderr = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True)
        stderr.close()
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith(AUDITOR_READY_PREFIX):
            self.stop()
            raise RuntimeError(f"auditor did not start (see {self.log_path})")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self, grace_s: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
