"""Start-up errors an operator must fix are one clear line, not a traceback.

Real processes, started as ``folio storage`` / ``folio gateway`` start them:
- a port already in use: exit code 2 and one ``FATAL cannot listen on
  host:port: ...`` line (storage node and gateway);
- a data dir that cannot be written: exit code 2 and one ``FATAL data dir ...
  is not writable`` line (storage node);
- etcd missing: the process waits for it (it may come later) and says so in
  one line naming the etcd endpoint, with no traceback.
Each process is ended by its own pid.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordination.ports import free_ports

pytestmark = pytest.mark.component


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def only_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


def test_storage_node_port_in_use(tmp_path: Path, taken_port: int) -> None:
    data_dir = str(tmp_path / "d")
    done = run(["storage.node", "--port", str(taken_port), "--data-dir", data_dir, "--etcd", "x:1"])
    assert done.returncode == 2
    line = only_line(done.stderr)
    assert line.startswith(f"FATAL cannot listen on 127.0.0.1:{taken_port}: "), line
    assert not (tmp_path / "d" / "journal").exists()  # refused before any file was opened


def test_storage_node_unwritable_data_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    data_dir = blocker / "data"
    done = run(["storage.node", "--port", "0", "--data-dir", str(data_dir), "--etcd", "x:1"])
    assert done.returncode == 2
    line = only_line(done.stderr)
    assert line.startswith(f"FATAL data dir {data_dir} is not writable: "), line


def test_gateway_port_in_use(taken_port: int) -> None:
    done = run(["gateway.main", "--port", str(taken_port), "--etcd", "127.0.0.1:1"])
    assert done.returncode == 2
    line = only_line(done.stderr)
    assert line.startswith(f"FATAL cannot listen on 127.0.0.1:{taken_port}: "), line


@pytest.mark.parametrize("kind", ["gateway", "storage"])
def test_missing_etcd_is_one_clear_line_naming_it(kind: str, tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{free_ports(1)[0]}"
    module = ["gateway.main", "--port", "0"] if kind == "gateway" else ["storage.node", "--port", "0"]
    extra = [] if kind == "gateway" else ["--data-dir", str(tmp_path / "d")]
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", *module, *extra, "--etcd", endpoint], stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        deadline = time.monotonic() + 30
        while endpoint not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()  # it waits for etcd rather than dying
            time.sleep(0.2)
        text = log.read_text()
        naming = [line for line in text.splitlines() if endpoint in line]
        assert naming and "etcd" in naming[0], text
        assert "Traceback" not in text, text
        assert proc.poll() is None, text
    finally:
        proc.kill()
        proc.wait(10)
