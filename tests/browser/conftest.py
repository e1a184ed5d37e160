"""Fixtures of the dashboard browser tests: a real cluster and Debian Chromium.

- ``dash_cluster`` (module): etcd namespace on the session etcd + 3 storage
  nodes + 2 gateways (``dashkit.DashCluster``), stopped by PID afterwards and
  the etcd namespace deleted.
- ``browser`` (module): Playwright driving ``/usr/bin/chromium`` headless. A
  missing Chromium FAILS the tests (``make test`` installs it); ``playwright
  install`` is never run.
- ``page`` (function): a fresh 1280x800 light-scheme page whose console errors
  and page errors are collected (``dashkit.errors_of``).
- ``artifacts`` (module): a pytest tmp dir for screenshots.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

# the component tests' cluster helpers (clusters.py, nodeproc.py) serve these tests too
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "component"))

import pytest
from dashkit import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, DashCluster, watch_errors
from playwright.sync_api import Browser, Page, sync_playwright

_clusters = itertools.count(1)


@pytest.fixture(scope="module")
def dash_cluster(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DashCluster]:
    namespace = f"/dashboard-{os.getpid()}-{next(_clusters):04d}"
    cluster = DashCluster.started(etcd_endpoint, namespace, tmp_path_factory.mktemp("dashboard"), 3, 2)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the dashboard tests need Debian's chromium "
            "(`make test` installs it; or `apt-get install -y chromium`). Never `playwright install`.",
            pytrace=False,
        )
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium_path: Path) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(chromium_path), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT, color_scheme="light")
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.errors = watch_errors(page)  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")
