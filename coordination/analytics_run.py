"""The analytics run record in etcd: requests, the running run and its progress (pure).

Owns: ``RunRecord`` (the JSON under ``keys.ANALYTICS_RUN``) and its
transitions - ``request`` (any gateway, on a user's "run now"; the service, on
a schedule), ``take``, ``progress`` and ``finish`` (the elected analytics
service) - and the schedule's bounds. Rules: one run at a time; a request
while a run is pending or running queues exactly one more (``queued``), never
two; a run covers the namespaces of its ``scope`` (empty: every namespace - a
user's request always), and a request that finds one queued widens its scope;
every transition is applied with a compare-and-swap on the key's revision by
the caller, so concurrent requests from several gateways and a service
failing over lose nothing.
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

# the schedule: the cluster setting and the namespace policy ``analyticsIntervalSeconds``
DEFAULT_INTERVAL_S = 300  # a scheduled run every 5 minutes unless set otherwise
INTERVAL_MAX_S = 7 * 24 * 3600


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
    scope: tuple[str, ...] = ()  # namespaces "tenant/ns" of the current or last run; () = every one
    queued_scope: tuple[str, ...] = ()  # of the queued run

    def to_json(self) -> bytes:
        raw = asdict(self)
        raw["state"] = self.state.value
        raw["scope"], raw["queued_scope"] = list(self.scope), list(self.queued_scope)
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
            scope=tuple(str(n) for n in raw.get("scope") or ()),
            queued_scope=tuple(str(n) for n in raw.get("queuedScope") or ()),
        )

    def view(self) -> dict[str, Any]:
        """The record as the admin API shows it."""
        out: dict[str, Any] = orjson.loads(self.to_json())
        return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def widen(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """The scope covering both (``()``: every namespace)."""
    return () if not a or not b else tuple(sorted(set(a) | set(b)))


def request(
    record: RunRecord, now_ms: int, reason: str = "requested", scope: tuple[str, ...] = ()
) -> tuple[RunRecord, RequestOutcome]:
    """Queue a run of ``scope``; one already queued is widened to cover it too."""
    if record.queued:
        return replace(record, queued_scope=widen(record.queued_scope, scope)), RequestOutcome.ALREADY_QUEUED
    outcome = RequestOutcome.QUEUED if record.state is RunState.RUNNING else RequestOutcome.STARTS
    return replace(record, queued=True, requested_ms=now_ms, reason=reason, queued_scope=scope), outcome


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
        scope=record.queued_scope,
        queued_scope=(),
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
        queued_scope=widen(record.scope, record.queued_scope) if record.queued else record.scope,
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
