"""The fault run's network leaves the machine as it found it (folio/faults/network.py),
and what an earlier run left behind does not stop the next one.

Guards a CI failure: a fault test's etcd member was still exiting when its namespace
was deleted, so its veth outlived the test, and the next test - same pytest process,
so the same name tag - could not create its own link of that name; the test after
that failed to start, which left its bridge, and every later fault test failed on it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from folio.faults.network import Network, ip

pytestmark = pytest.mark.component


def ours(tag: str) -> list[str]:
    """Every link and namespace on the machine whose name carries ``flt<tag>``."""
    text = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    text += subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return sorted(set(re.findall(rf"\bflt{tag}(?:v\d+|-\w+)?(?![\w-])", text)))


@pytest.fixture
def stale() -> Iterator[str]:
    """A dead run's leftovers under one tag: its bridge, a veth and a namespace."""
    tag = "9917"
    try:
        ip("link", "add", f"flt{tag}", "type", "bridge")
        ip("netns", "add", f"flt{tag}-etcd0")
        ip("link", "add", f"flt{tag}v0", "type", "veth", "peer", "name", "eth0", "netns", f"flt{tag}-etcd0")
        yield tag
    finally:
        ip("link", "del", f"flt{tag}", check=False)
        ip("link", "del", f"flt{tag}v0", check=False)
        ip("netns", "del", f"flt{tag}-etcd0", check=False)


def test_a_run_starts_beside_a_dead_runs_leftovers_and_removes_only_its_own(stale: str) -> None:
    net = Network(tag=stale)
    try:
        net.start()
        assert net.tag != stale
        net.add_etcd_member("etcd0")
        net.add("node0")
        t = net.tag
        assert ours(t) == sorted([f"flt{t}", f"flt{t}v0", f"flt{t}v1", f"flt{t}-etcd0", f"flt{t}-node0"])
    finally:
        net.close()
    assert ours(net.tag) == []
    assert len(ours(stale)) == 3  # the dead run's things are not this run's to remove


def test_close_removes_a_link_whose_namespace_still_holds_a_process() -> None:
    net = Network()
    sleeper = None
    try:
        net.start()
        net.add("etcd0")
        # A process that has not exited keeps its namespace - and the veth end in it -
        # alive after ``ip netns del``.
        sleeper = subprocess.Popen([*net.prefix("etcd0"), "sleep", "30"])
        net.close()
        assert ours(net.tag) == []
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        net.close()
