"""The simulation's summary line: how many seeds ran, in how long (seeds/s)."""

from __future__ import annotations

import pytest

_SEED_TEST = "test_invariants_hold_under_faults_and_recovery"
_durations: list[float] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and _SEED_TEST in report.nodeid:
        _durations.append(report.duration)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _durations:
        total = sum(_durations)
        terminalreporter.write_line(
            f"simulation: {len(_durations)} seeds in {total:.1f} s ({len(_durations) / total:.1f} seeds/s)"
        )
