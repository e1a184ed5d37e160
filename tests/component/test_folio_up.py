"""``folio up`` starts etcd + 3 storage nodes + the auditor, ``folio status``
sees them, a child killed -9 (a node, the auditor, a gateway, etcd itself) is
started again (and that is printed) and the cluster serves again, and
SIGTERM stops every child cleanly (no process left behind)."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from folioup import FolioUp, command_of, port_flags

from coordination.ports import free_ports

pytestmark = pytest.mark.component


def eventually(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)


def healthy(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/admin/v2/brokers/health", timeout=5).read() == b"ok"
    except OSError:
        return False


def test_folio_up_status_restart_and_clean_stop(tmp_path: Path) -> None:
    base = free_ports(10, consecutive=True)[0]
    data = str(tmp_path / "data")
    with FolioUp(tmp_path, "--data", data, *port_flags(base), "--auditor-grace-ms", "5000") as up:
        lines = up.lines
        banner = up.wait_ready()
        for port in (base, base + 2, base + 3, base + 4, base + 8, base + 9):
            assert f"127.0.0.1:{port}" in banner, banner
        children = up.children()
        assert len(children) == 8, banner  # etcd, 3 nodes, auditor, 2 gateways, analytics
        assert "analytics      Spark local[*]" in banner, banner
        for port in (base + 8, base + 9):
            health = urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/v2/brokers/health", timeout=10)
            assert health.read() == b"ok"
            dashboard = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read()
            assert b"Cluster overview" in dashboard
        assert f"dashboard      http://127.0.0.1:{base + 8}/" in banner, banner
        assert "security       OFF: open on loopback" in banner, banner
        assert "auditor" in banner and "metrics http://127.0.0.1:" in banner.split("auditor", 1)[1], banner

        status = up.run("status", "--etcd", f"127.0.0.1:{base}")
        assert status.returncode == 0, status.stderr
        assert "storage nodes (3 live)" in status.stdout, status.stdout
        assert "auditor: " in status.stdout and "none elected" not in status.stdout, status.stdout

        # kill -9 a storage node, the auditor and a gateway: each is started again
        node_pid = int(re.search(rf"127\.0\.0\.1:{base + 2} .*\(pid (\d+)", banner)[1])  # type: ignore[index]
        auditor_pid = int(re.search(r"auditor +pid (\d+)", banner)[1])  # type: ignore[index]
        gateway_pid = int(re.search(rf"127\.0\.0\.1:{base + 9} .*\(pid (\d+)\)", banner)[1])  # type: ignore[index]
        for pid in (node_pid, auditor_pid, gateway_pid):
            os.kill(pid, signal.SIGKILL)
        for label in (
            f"storage node 127.0.0.1:{base + 2}",
            "auditor",
            f"gateway http://127.0.0.1:{base + 9}",
        ):
            eventually(lambda label=label: f"{label} restarted (pid" in "".join(lines), f"{label} restarted")
            assert f"{label} exited with -9; restarting it in 0.0 s" in "".join(lines), "".join(lines)
        eventually(lambda: healthy(f"http://127.0.0.1:{base + 9}"), "the restarted gateway serves")

        def three_nodes_live() -> bool:
            again = up.run("status", "--etcd", f"127.0.0.1:{base}")
            return "storage nodes (3 live)" in again.stdout

        eventually(three_nodes_live, "the restarted node registers")

        # kill -9 etcd itself: it is started again on its data, and everything serves again
        etcd_pid = next(pid for pid in up.children() if "etcd" in command_of(pid))
        os.kill(etcd_pid, signal.SIGKILL)
        eventually(lambda: f"etcd 127.0.0.1:{base} restarted (pid" in "".join(lines), "etcd restarted")
        for port in (base + 8, base + 9):
            eventually(lambda port=port: healthy(f"http://127.0.0.1:{port}"), f"gateway {port} serves")
        eventually(three_nodes_live, "the nodes register again after the etcd restart")
        children = up.children()
        assert len(children) == 8 and not {node_pid, auditor_pid, gateway_pid} & set(children)
        print("".join(line for line in lines if "restart" in line))

        assert up.terminate() == 0
        for pid in children:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
