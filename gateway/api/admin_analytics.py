"""Admin REST: the Spark statistics - a topic's results, the cluster summary, runs.

Owns: the HTTP shape of ``/admin/v2/analytics/…`` (thin shell over etcd):
``GET summary`` (the last run's cluster summary and the run record),
``GET/POST run`` (follow the current run's progress; request a run),
``GET topics/{domain}/{tenant}/{namespace}/{topic}`` (one topic's or
partition's results; a partitioned topic's are summed by the service) and
``GET/PUT settings`` (the cluster's run interval; a namespace's own interval is
its policy ``analyticsIntervalSeconds``, set under ``/admin/v2/namespaces``). Rules: the statistics are
computed by the elected ``folio analytics`` service from the log (never by a
gateway); a gateway only reads what it wrote to etcd and records requests in
the run record (``coordination.analytics_run``: one run at a time, one
queued), so any gateway can start a run and report its progress.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from coordination import analytics_run as run_core
from coordination import keys
from coordination.election import current_leader
from coordination.store import update_with_retry
from gateway.api import errors
from gateway.api.route_docs import TopicRefPath

if TYPE_CHECKING:
    from gateway.process import Gateway

TAGS: list[str | Any] = ["admin-analytics"]
# a topic's statistics before any run has covered it; a stored one has these fields, in this order
NOT_RUN: dict[str, Any] = {"runId": None, "atMs": None, "positions": {}, "read": {}, "results": None}


class AnalyticsSettings(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    intervalSeconds: int = Field(
        ge=0, le=run_core.INTERVAL_MAX_S, description="seconds between scheduled runs; 0 = only on demand"
    )


class RunProgress(BaseModel):
    phase: str
    done: int
    total: int


class AnalyticsRun(BaseModel):
    state: str = Field(description="idle or running")
    queued: bool = Field(description="a run is requested and waits for the service")
    runId: int
    reason: str
    requestedMs: int | None
    startedMs: int | None
    finishedMs: int | None
    progress: RunProgress
    service: str
    error: str | None
    last: dict[str, Any] = Field(description="the last finished run: runId, times, topics, messages read")
    scope: list[str] = Field(description="namespaces tenant/ns of the current or last run; [] = all")
    queuedScope: list[str] = Field(description="namespaces of the queued run; [] = every one")
    leader: str | None = Field(description="the elected analytics service (null: none is running)")


class RunRequested(AnalyticsRun):
    outcome: str = Field(description="starts, queued (after the running one) or alreadyQueued")


class AnalyticsSummary(BaseModel):
    run: AnalyticsRun
    summary: dict[str, Any] | None = Field(
        description="hottest and largest topics, skewed keys, subscriptions behind (null before a first run)"
    )


class TopicAnalytics(BaseModel):
    topic: str
    runId: int | None = Field(description="the run that wrote these results (null: no run covered it yet)")
    atMs: int | None
    positions: dict[str, Any] = Field(description="per partition, the last [ledgerId, entryId] folded")
    read: dict[str, Any] = Field(
        description="what the last run read: entries, messages, from and to positions"
    )
    results: dict[str, Any] | None


def make_router(get_gateway: Callable[[], Gateway]) -> APIRouter:
    router = APIRouter(prefix="/admin/v2/analytics", tags=TAGS)

    async def run_view(record: run_core.RunRecord) -> dict[str, Any]:
        leader = await current_leader(get_gateway().store, keys.ANALYTICS_ELECTION)
        return {**record.view(), "leader": leader}

    async def read_run() -> run_core.RunRecord:
        kv = await get_gateway().store.get(keys.ANALYTICS_RUN)
        return run_core.RunRecord.from_json(kv.value if kv else None)

    @router.get(
        "/run",
        summary="The current or last statistics run: state, progress, queued request, last figures",
        response_model=AnalyticsRun,
        responses=errors.responses(),
    )
    async def get_run() -> dict[str, Any]:
        return await run_view(await read_run())

    @router.post(
        "/run",
        summary="Request a statistics run now (one runs at a time; a request during a run is queued once)",
        response_model=RunRequested,
        status_code=202,
        responses=errors.responses(),
    )
    async def request_run() -> dict[str, Any]:
        gateway = get_gateway()
        outcome: list[run_core.RequestOutcome] = []

        def modify(raw: bytes | None) -> bytes | None:
            old = run_core.RunRecord.from_json(raw)
            record, result = run_core.request(old, gateway.clock.now_ms())
            outcome[:] = [result]
            return None if record == old else record.to_json()  # a queued scheduled run is widened

        value, _ = await update_with_retry(gateway.store, keys.ANALYTICS_RUN, modify)
        view = await run_view(run_core.RunRecord.from_json(value))
        return {**view, "outcome": outcome[0].value}

    @router.get(
        "/summary",
        summary="Summary of the last run: hottest and largest topics, skewed keys, subscriptions behind",
        response_model=AnalyticsSummary,
        responses=errors.responses(),
    )
    async def get_summary() -> dict[str, Any]:
        kv = await get_gateway().store.get(keys.ANALYTICS_SUMMARY)
        return {"run": await run_view(await read_run()), "summary": orjson.loads(kv.value) if kv else None}

    @router.get(
        "/topics/{domain}/{tenant}/{namespace}/{topic}",
        summary="A topic's statistics from the last run (a partitioned topic's: all partitions)",
        response_model=TopicAnalytics,
        responses=errors.responses(412),
    )
    async def get_topic(at: TopicRefPath) -> Any:
        name = at.topic_name()
        kv = await get_gateway().store.get(keys.analytics_topic(name.path))
        if kv is None:  # no run has covered it yet: not an error (the dashboard asks before the first run)
            return {"topic": str(name), **NOT_RUN}
        stored = orjson.loads(kv.value)
        return {"topic": str(name), **{field: stored[field] for field in NOT_RUN}}

    @router.get(
        "/settings",
        summary="The statistics schedule of the cluster",
        response_model=AnalyticsSettings,
        responses=errors.responses(),
    )
    async def get_settings() -> dict[str, Any]:
        kv = await get_gateway().store.get(keys.ANALYTICS_SETTINGS)
        return orjson.loads(kv.value) if kv else {"intervalSeconds": run_core.DEFAULT_INTERVAL_S}

    @router.put(
        "/settings",
        summary="Set the statistics schedule of the cluster (0: runs only on demand)",
        status_code=204,
        responses=errors.responses(400),
    )
    async def put_settings(settings: AnalyticsSettings) -> None:
        await get_gateway().store.put(keys.ANALYTICS_SETTINGS, orjson.dumps(settings.model_dump()))

    return router
