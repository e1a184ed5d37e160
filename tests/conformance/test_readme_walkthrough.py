"""The README's curl walkthrough, pasted in order into a shell, on a fresh cluster.

The block under "Use it with curl" is run as one ``bash -e`` script (each
command as written; only the two gateway addresses are replaced by the test
cluster's, and ``curl`` gets ``-sS --fail-with-body`` so an HTTP error stops
the script). It runs in an empty directory against a cluster no other test has
used. What it shows: every command succeeds in order - publish raw and JSON,
fetch, nack one message and ack the rest by the ids fetched (the answers count
what matched and list nothing unmatched), stream, webhook set/show/delete.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "component"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

from dashkit import DashCluster  # the helpers' paths are set just above

pytestmark = pytest.mark.component

README = Path(__file__).resolve().parents[2] / "README.md"
_clusters = itertools.count(1)


def walkthrough() -> str:
    text = README.read_text()
    section = text[text.index("## Use it with curl") :]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, "no sh block under 'Use it with curl'"
    return match.group(1)


@pytest.fixture(scope="module")
def cluster(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DashCluster]:
    namespace = f"/readme-{os.getpid()}-{next(_clusters):04d}"
    made = DashCluster.started(etcd_endpoint, namespace, tmp_path_factory.mktemp("readme"), 3, 2)
    try:
        yield made
    finally:
        made.stop()


def test_readme_curl_walkthrough_runs_in_order(cluster: DashCluster, tmp_path: Path) -> None:
    script = walkthrough()
    assert "127.0.0.1:8080" in script and "127.0.0.1:8081" in script
    for index, url in enumerate(cluster.urls):
        script = script.replace(f"127.0.0.1:{8080 + index}", url.removeprefix("http://"))
    prelude = 'curl() { command curl -sS --fail-with-body --max-time 30 "$@"; }\n'
    done = subprocess.run(
        ["bash", "-e", "-c", prelude + script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(done.stdout)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    out = done.stdout
    assert out.count('"messageId"') >= 3  # the publish replies and the fetched messages
    assert '{"nacked":1,"unmatched":[]}' in out, out
    assert '{"acked":2,"unmatched":[]}' in out, out
    assert '"url":"http://127.0.0.1:9000/hook"' in out, out
