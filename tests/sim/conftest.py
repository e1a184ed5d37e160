"""The simulation's summary line: how many seeds ran, in how long (seeds/s)."""

from __future__ import annotations

import pytest

_SEED_TESTS = {
    "test_invariants_hold_under_faults_and_recovery": "ledger",
    "test_managed_log_keeps_every_confirmed_append": "managed log",
    "test_topic_keeps_every_confirmed_publish": "topics and hand-over",
}
_durations: dict[str, list[float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        for test, kind in _SEED_TESTS.items():
            if test in report.nodeid:
                _durations.setdefault(kind, []).append(report.duration)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for kind, durations in _durations.items():
        total = sum(durations)
        terminalreporter.write_line(
            f"simulation ({kind}): {len(durations)} seeds in {total:.1f} s "
            f"({len(durations) / total:.1f} seeds/s)"
        )
