"""The analytics run record (coordination/analytics_run.py): one run at a time, one queued."""

from __future__ import annotations

import pytest

from coordination import analytics_run as core
from coordination.analytics_run import Progress, RequestOutcome, RunRecord, RunState

pytestmark = pytest.mark.unit


def test_a_request_during_a_run_is_queued_once() -> None:
    record, outcome = core.request(RunRecord(), 1000)
    assert outcome is RequestOutcome.STARTS and record.queued
    again, outcome = core.request(record, 1001)
    assert outcome is RequestOutcome.ALREADY_QUEUED and again == record
    running = core.take(record, "svc-a", 1100)
    assert running is not None and running.state is RunState.RUNNING and running.run_id == 1
    assert not running.queued and core.take(running, "svc-a", 1101) is None  # one at a time
    queued, outcome = core.request(running, 1200)
    assert outcome is RequestOutcome.QUEUED and queued.state is RunState.RUNNING
    assert core.request(queued, 1300)[1] is RequestOutcome.ALREADY_QUEUED
    moved = core.progress(queued, 1, Progress("reading", 3, 8))
    assert moved is not None and moved.progress == Progress("reading", 3, 8)
    assert core.progress(queued, 2, Progress("x", 1, 1)) is None  # not that run
    done = core.finish(moved, 1, 2000, {"messages": 10})
    assert done is not None and done.state is RunState.IDLE and done.queued
    assert done.last == {"runId": 1, "startedMs": 1100, "finishedMs": 2000, "messages": 10}
    assert done.progress == Progress("done", 8, 8)
    second = core.take(done, "svc-a", 2001)
    assert second is not None and second.run_id == 2 and not second.queued


def test_json_round_trip_and_failover_requeues_a_dead_services_run() -> None:
    record = core.take(core.request(RunRecord(), 5)[0], "svc-a", 6)
    assert record is not None
    assert RunRecord.from_json(record.to_json()) == record
    assert core.adopt(record, "svc-a", 7) is None  # its own run
    adopted = core.adopt(record, "svc-b", 7)
    assert adopted is not None and adopted.queued and adopted.state is RunState.IDLE
    assert adopted.error == "service svc-a stopped"
    assert core.take(adopted, "svc-b", 8) is not None


def test_schedule_is_due_after_the_interval_and_never_when_off() -> None:
    idle = RunRecord(finished_ms=10_000)
    assert not core.due(idle, 60, 69_999) and core.due(idle, 60, 70_000)
    assert not core.due(idle, 0, 10**9)
    assert core.due(RunRecord(), 60, 0)  # never ran
    assert not core.due(RunRecord(queued=True), 60, 10**9)
    failed = core.finish(core.take(core.request(RunRecord(), 0)[0], "s", 1), 1, 2, {}, "boom")
    assert failed is not None and failed.error == "boom" and failed.last == {}
