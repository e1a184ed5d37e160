"""The analytics run record in etcd: requests, the running run and its progress (pure).

Owns: ``RunRecord`` (the JSON under ``keys.ANALYTICS_RUN``) and its
transitions - ``request`` (any gateway, on a user's "run now"), ``take``,
``progress`` and ``finish`` (the elected analytics service). Rules: one run at
a time; a request while a run is pending or running queues exactly one more
(``queued``), never two; every transition is applied with a compare-and-swap
on the key's revision by the caller (``update_with_retry``), so concurrent
requests from several gateways and a service failing over lose nothing.
Time is an argument (``now_ms``).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

# SQL over topics: the bounds of one query (a gateway checks them, the service enforces them)
QUERY_ROWS_MAX = 10_000
QUERY_BYTES_MAX = 1 << 20  # an answer is stored in etcd: at most 1 MiB
QUERY_SECONDS_MAX = 300
QUERY_CHARS_MAX = 10_000
QUERY_HISTORY = 20  # answers kept in etcd, newest first


class RunState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"


class RequestOutcome(enum.Enum):
    STARTS = "starts"  # nothing running: the service starts it next
    QUEUED = "queued"  # a run is going: this one follows it
    ALREADY_QUEUED = "alreadyQueued"  # one is waiting already: this request is that one


@dataclass(frozen=True, slots=True)
class Progress:
    phase: str = ""
    done: int = 0
    total: int = 0


@dataclass(frozen=True, slots=True)
class RunRecord:
    state: RunState = RunState.IDLE
    queued: bool = False  # a run is requested and not yet taken
    run_id: int = 0  # of the current or last run
    reason: str = ""  # "requested" or "scheduled"
    requested_ms: int | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    progress: Progress = field(default_factory=Progress)
    service: str = ""  # the analytics service running it
    error: str | None = None  # of the last run
    last: dict[str, Any] = field(default_factory=dict)  # the last finished run: figures

    def to_json(self) -> bytes:
        raw = asdict(self)
        raw["state"] = self.state.value
        return orjson.dumps({_camel(k): v for k, v in raw.items()})

    @classmethod
    def from_json(cls, data: bytes | None) -> RunRecord:
        if not data:
            return cls()
        raw = orjson.loads(data)
        return cls(
            state=RunState(raw["state"]),
            queued=bool(raw["queued"]),
            run_id=int(raw["runId"]),
            reason=str(raw.get("reason", "")),
            requested_ms=raw.get("requestedMs"),
            started_ms=raw.get("startedMs"),
            finished_ms=raw.get("finishedMs"),
            progress=Progress(**raw.get("progress") or {}),
            service=str(raw.get("service", "")),
            error=raw.get("error"),
            last=dict(raw.get("last") or {}),
        )

    def view(self) -> dict[str, Any]:
        """The record as the admin API shows it."""
        out: dict[str, Any] = orjson.loads(self.to_json())
        return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def request(record: RunRecord, now_ms: int, reason: str = "requested") -> tuple[RunRecord, RequestOutcome]:
    if record.queued:
        return record, RequestOutcome.ALREADY_QUEUED
    outcome = RequestOutcome.QUEUED if record.state is RunState.RUNNING else RequestOutcome.STARTS
    return replace(record, queued=True, requested_ms=now_ms, reason=reason), outcome


def take(record: RunRecord, service: str, now_ms: int) -> RunRecord | None:
    """Start the queued run, or None when nothing is queued or a run is going."""
    if not record.queued or record.state is RunState.RUNNING:
        return None
    return replace(
        record,
        state=RunState.RUNNING,
        queued=False,
        run_id=record.run_id + 1,
        started_ms=now_ms,
        finished_ms=None,
        progress=Progress("planning"),
        service=service,
        error=None,
    )


def adopt(record: RunRecord, service: str, now_ms: int) -> RunRecord | None:
    """A newly elected service finds a run left RUNNING by a service that died:
    it is queued again (its results were never written) and will be taken anew."""
    if record.state is not RunState.RUNNING or record.service == service:
        return None
    return replace(
        record,
        state=RunState.IDLE,
        queued=True,
        error=f"service {record.service} stopped",
        finished_ms=now_ms,
    )


def progress(record: RunRecord, run_id: int, step: Progress) -> RunRecord | None:
    if record.state is not RunState.RUNNING or record.run_id != run_id:
        return None
    return replace(record, progress=step)


def finish(
    record: RunRecord, run_id: int, now_ms: int, figures: dict[str, Any], error: str | None = None
) -> RunRecord | None:
    if record.state is not RunState.RUNNING or record.run_id != run_id:
        return None
    done = (
        Progress("done", record.progress.total, record.progress.total) if error is None else record.progress
    )
    last = {"runId": run_id, "startedMs": record.started_ms, "finishedMs": now_ms, **figures}
    return replace(
        record,
        state=RunState.IDLE,
        finished_ms=now_ms,
        progress=done,
        error=error,
        last=last if not error else record.last,
    )


def due(record: RunRecord, interval_s: int, now_ms: int) -> bool:
    """Is a scheduled run due (``interval_s`` > 0, nothing queued or running, the last one old enough)?"""
    if interval_s <= 0 or record.queued or record.state is RunState.RUNNING:
        return False
    last = record.finished_ms if record.finished_ms is not None else record.started_ms
    return last is None or now_ms - last >= interval_s * 1000
