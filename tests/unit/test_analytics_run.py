"""The analytics run record (coordination/analytics_run.py): one run at a time, one queued."""

from __future__ import annotations

import pytest
from folio_analytics.schedule import POLICY, Schedule, covered, due_scope

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


def test_a_failed_run_keeps_the_last_figures() -> None:
    failed = core.finish(core.take(core.request(RunRecord(), 0)[0], "s", 1), 1, 2, {}, "boom")
    assert failed is not None and failed.error == "boom" and failed.last == {}


def test_a_queued_scheduled_run_is_widened_by_later_requests() -> None:
    queued, outcome = core.request(RunRecord(), 0, "scheduled", ("t/a",))
    assert outcome is RequestOutcome.STARTS and queued.queued_scope == ("t/a",)
    wider, outcome = core.request(queued, 1, "scheduled", ("t/b",))
    assert outcome is RequestOutcome.ALREADY_QUEUED and wider.queued_scope == ("t/a", "t/b")
    every, _ = core.request(wider, 2)  # a user's run now covers every namespace
    assert every.queued_scope == ()
    running = core.take(wider, "svc", 3)
    assert running is not None and running.scope == ("t/a", "t/b") and running.queued_scope == ()
    assert RunRecord.from_json(running.to_json()) == running
    adopted = core.adopt(running, "other", 4)
    assert adopted is not None and adopted.queued_scope == ("t/a", "t/b")


def test_each_namespace_runs_on_its_own_interval_or_the_clusters() -> None:
    policies = {"t/fast": {POLICY: 10}, "t/off": {POLICY: 0}, "t/plain": {}}
    policies["t/gone"] = {POLICY: 1, "deleted": True}
    schedule = Schedule.of({"intervalSeconds": 60}, policies)
    assert [schedule.interval_s(n) for n in ("t/fast", "t/off", "t/plain")] == [10, 0, 60]
    assert due_scope(Schedule.of(None, {"t/a": {}, "t/b": {}}), {}, 0) == ()  # all due: one run of all
    assert due_scope(schedule, {}, 0) == ("t/fast", "t/plain")  # never covered; t/off: on demand only
    assert covered({}, (), schedule.namespaces, 5) == {"t/fast": 5, "t/off": 5, "t/plain": 5}
    last = covered({}, ("t/fast", "t/plain"), schedule.namespaces, 1_000)
    assert last == {"t/fast": 1_000, "t/plain": 1_000}
    assert due_scope(schedule, last, 10_999) is None
    assert due_scope(schedule, last, 11_000) == ("t/fast",)  # the shortest due schedule starts a run
    last = covered(last, ("t/fast",), schedule.namespaces, 11_000)
    assert due_scope(schedule, last, 20_999) is None
    assert due_scope(schedule, last, 61_000) == ("t/fast", "t/plain")
    assert due_scope(Schedule.of({"intervalSeconds": 0}, {"t/x": {}}), {}, 10**12) is None
    assert Schedule.of(None, {}).cluster_s == core.DEFAULT_INTERVAL_S
    assert "t/gone" not in covered({"t/gone": 5}, (), schedule.namespaces, 2)
