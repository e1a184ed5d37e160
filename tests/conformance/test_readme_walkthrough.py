"""The README's tour and the user guide's walkthroughs, pasted in order into a shell.

Each ``sh`` block is run as one ``bash -e`` script (each command as written;
only the two gateway addresses are replaced by the test cluster's, and
``curl`` gets ``-sS --fail-with-body`` so an HTTP error stops the script), in
an empty directory, against a cluster no other test has used:
- the README's step 1 (publish raw and JSON, fetch from the other gateway, ack
  by the ids fetched, stats): the ack counts the three messages, nothing
  unmatched;
- docs/publishing.md §1 (publish raw and JSON, fetch, nack one and ack the
  rest, stream, webhook set/show/delete);
- docs/subscriptions.md's cursor moves and webhook commands.
The README's browser consumer runs in Chromium (tests/browser/test_readme_browser.py)
and its Spark job and SQL query on the analytics stack
(tests/analytics/test_analytics_service.py).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pasted
import pytest
from pasted import code_block, code_blocks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "component"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

from dashkit import DashCluster  # the helpers' paths are set just above

pytestmark = pytest.mark.component

ROOT = Path(__file__).resolve().parents[2]
_clusters = itertools.count(1)


def tour_step_one() -> str:
    return code_block("### 1. Publish and consume with curl")


@pytest.fixture(scope="module")
def cluster(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DashCluster]:
    namespace = f"/readme-{os.getpid()}-{next(_clusters):04d}"
    made = DashCluster.started(etcd_endpoint, namespace, tmp_path_factory.mktemp("readme"), 3, 2)
    try:
        yield made
    finally:
        made.stop()


def run_pasted(cluster: DashCluster, script: str, cwd: Path) -> str:
    """Run ``script`` as pasted (the gateways' addresses swapped in); its output."""
    assert "127.0.0.1:8080" in script
    out = pasted.run_pasted(cluster.urls, script, cwd, 120)
    print(out)
    return out


def test_readme_tour_step_one_runs_in_order(cluster: DashCluster, tmp_path: Path) -> None:
    out = run_pasted(cluster, tour_step_one(), tmp_path)
    assert out.count('"messageId"') >= 3  # the publish replies and the fetched messages
    assert '{"acked":3,"unmatched":[]}' in out, out
    assert '"msgInCounter":3' in out, out


def test_publishing_walkthrough_runs_in_order(cluster: DashCluster, tmp_path: Path) -> None:
    script = code_block("## 1. With curl", page=ROOT / "docs" / "publishing.md")
    assert "127.0.0.1:8081" in script
    out = run_pasted(cluster, script, tmp_path)
    assert out.count('"messageId"') >= 3  # the publish replies and the fetched messages
    assert '{"nacked":1,"unmatched":[]}' in out, out
    assert '{"acked":2,"unmatched":[]}' in out, out
    assert '"url":"http://127.0.0.1:9000/hook"' in out, out


def test_subscription_commands_run_in_order(cluster: DashCluster, tmp_path: Path) -> None:
    blocks = code_blocks(ROOT / "docs" / "subscriptions.md")
    assert len(blocks) == 2
    publish = "curl -d x http://127.0.0.1:8080/topics/persistent/public/default/demo\n"
    out = run_pasted(cluster, publish + "\n".join(blocks), tmp_path)
    assert '"audit"' in out, out  # listed among the topic's subscriptions before it is deleted
    assert '"url":"http://127.0.0.1:9000/hook"' in out, out
