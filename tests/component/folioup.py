"""Test helper: ``python -m folio up`` as a real child process, and the ports it takes.

Owns: ``FolioUp`` (start ``folio up`` with the given flags, collect its output
line by line, wait for its "Folio is up" banner, run other ``folio`` commands
beside it, stop it with SIGTERM; on leaving, whatever still runs is killed -9
by PID, its children first), ``port_flags`` (over a run of ports from
``coordination.ports.free_ports(10, consecutive=True)``) and the ``ps`` look-ups
``children_of``/``command_of``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[2]


def port_flags(base: int) -> list[str]:
    """``folio up``'s port flags over a run of ten ports from ``base``:
    etcd base (+1 peer), nodes base+2.., metrics base+5.., gateways base+8 and base+9."""
    return [
        *("--etcd-port", str(base), "--node-port", str(base + 2)),
        *("--metrics-port", str(base + 5), "--gateway-port", str(base + 8)),
    ]


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def command_of(pid: int) -> str:
    return subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout


class FolioUp:
    """``folio up *args`` run in ``cwd``; use as a context manager."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.cwd = cwd
        self.env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "folio", "up", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            env=self.env,
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_ready(self, timeout_s: float = 90.0) -> str:
        """Wait for the banner; returns the output up to it."""
        assert self._ready.wait(timeout_s), self.output
        return self.output

    def run(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``folio *args`` in the same directory and environment."""
        return subprocess.run(
            [sys.executable, "-m", "folio", *args],
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env,
            timeout=timeout_s,
        )

    def children(self) -> list[int]:
        return children_of(self.proc.pid)

    def terminate(self) -> int:
        """SIGTERM, as a user's Ctrl-C would; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def __enter__(self) -> FolioUp:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc.poll() is None:
            for pid in self.children():
                os.kill(pid, signal.SIGKILL)
            self.proc.kill()
            self.proc.wait(10)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if "Folio is up" in line:
                self._ready.set()
