"""Admin REST: SQL over topics, answered by the analytics service.

Owns: ``POST /admin/v2/analytics/sql`` (submit a query and wait for its answer
up to ``waitSeconds``), ``GET /admin/v2/analytics/sql`` (the recent queries,
newest first, without their rows), ``GET …/sql/{queryId}`` (one query with its
rows) and ``GET …/sql/{queryId}/csv`` (its rows as CSV). Rules: a gateway only
writes the query into etcd (``keys.analytics_query``) and reads the answer
back; the elected ``folio analytics`` service runs it on Spark, reading every
topic it names from the storage nodes. No service elected: 503 at once. A
query that fails or passes its byte or time bound: 400 with the service's
reason (``query_failed``); still running when the wait ends: 202 with the
record, to be polled.
"""

from __future__ import annotations

import asyncio
import csv
import io
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import orjson
from fastapi import APIRouter, Path
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from starlette.responses import Response

from coordination import keys
from coordination.analytics_run import (
    QUERY_BYTES_MAX,
    QUERY_CHARS_MAX,
    QUERY_HISTORY,
    QUERY_ROWS_MAX,
    QUERY_SECONDS_MAX,
)
from coordination.election import current_leader
from gateway.api import errors
from gateway.api.admin_analytics import TAGS
from gateway.errors import GatewayError
from gateway.meta.errors import NotFound

if TYPE_CHECKING:
    from gateway.process import Gateway

POLL_S = 0.1
WAIT_MAX_S = 60


def _whole(value: Any) -> Any:
    """JSON's 996.0 is the integer 996 (JSON Schema says so); 996.5 and "996" stay refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


WholeNumber = Annotated[int, BeforeValidator(_whole)]


class SqlQuery(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    query: str = Field(
        min_length=1,
        max_length=QUERY_CHARS_MAX,
        description='Spark SQL; name a topic as a table in double quotes: "public/default/orders"',
    )
    maxRows: WholeNumber = Field(
        1000, ge=1, le=QUERY_ROWS_MAX, description="rows past this are cut (truncated)"
    )
    maxBytes: WholeNumber = Field(
        QUERY_BYTES_MAX, ge=1, le=QUERY_BYTES_MAX, description="an answer over this is an error"
    )
    timeoutSeconds: WholeNumber = Field(
        30, ge=1, le=QUERY_SECONDS_MAX, description="the query is stopped after this"
    )
    waitSeconds: WholeNumber = Field(
        30, ge=0, le=WAIT_MAX_S, description="how long this request waits for the answer"
    )


class SqlColumn(BaseModel):
    name: str
    type: str


class SqlAnswer(BaseModel):
    id: str
    query: str
    state: str = Field(description="pending, running, done or error")
    submittedMs: int
    elapsedMs: int | None = None
    error: str | None = None
    columns: list[SqlColumn] = []
    rows: list[list[Any]] = []
    rowCount: int | None = None
    truncated: bool = False
    maxRows: int
    maxBytes: int
    timeoutSeconds: int


class QueryFailed(GatewayError):
    """The analytics service refused or stopped the query (bad SQL, a bound passed)."""

    code = "query_failed"


class NoAnalyticsService(GatewayError):
    """No ``folio analytics`` service is elected to answer."""

    code = "analytics_unavailable"
    retriable = True


QueryId = Path(pattern=r"^[0-9]{1,20}$", description="the query's id")


def csv_text(record: dict[str, Any]) -> str:
    """A query's rows as CSV (RFC 4180; nested values as JSON)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([c["name"] for c in record.get("columns", [])])
    for row in record.get("rows", []):
        writer.writerow(
            ["" if v is None else orjson.dumps(v).decode() if isinstance(v, dict | list) else v for v in row]
        )
    return out.getvalue()


def make_router(get_gateway: Callable[[], Gateway]) -> APIRouter:
    router = APIRouter(prefix="/admin/v2/analytics", tags=TAGS)

    async def load(query_id: str) -> dict[str, Any]:
        kv = await get_gateway().store.get(keys.analytics_query(int(query_id)))
        if kv is None:
            raise NotFound(f"No query {query_id} (the newest {QUERY_HISTORY} are kept)")
        record: dict[str, Any] = orjson.loads(kv.value)
        return record

    @router.post(
        "/sql",
        summary="Run a Spark SQL query over topics (each topic a table) on the analytics service",
        response_model=SqlAnswer,
        responses={
            **errors.responses(400, 503),
            202: {"description": "still running: poll GET sql/{queryId}"},
        },
    )
    async def run_sql(body: SqlQuery, response: Response) -> dict[str, Any]:
        gateway = get_gateway()
        if await current_leader(gateway.store, keys.ANALYTICS_ELECTION) is None:
            raise NoAnalyticsService("No analytics service is running (start `folio analytics`)")
        now = gateway.clock.now_ms()
        query_id = now * 1000 + secrets.randbelow(1000)
        record = {
            "id": str(query_id),
            "query": body.query,
            "state": "pending",
            "submittedMs": now,
            "maxRows": body.maxRows,
            "maxBytes": body.maxBytes,
            "timeoutSeconds": body.timeoutSeconds,
        }
        key = keys.analytics_query(query_id)
        await gateway.store.put(key, orjson.dumps(record))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + body.waitSeconds
        while True:
            kv = await gateway.store.get(key)
            if kv is not None:
                record = orjson.loads(kv.value)
            if record["state"] == "error":
                raise QueryFailed(record.get("error") or "query failed")
            if record["state"] == "done":
                return record
            if loop.time() >= deadline:
                response.status_code = 202
                return record
            await asyncio.sleep(POLL_S)

    @router.get(
        "/sql",
        summary="The recent SQL queries, newest first (without their rows)",
        response_model=list[SqlAnswer],
        responses=errors.responses(),
    )
    async def list_sql() -> list[dict[str, Any]]:
        listing = await get_gateway().store.list_prefix(keys.ANALYTICS_QUERIES)
        out = []
        for kv in reversed(listing[-QUERY_HISTORY:]):
            record = orjson.loads(kv.value)
            record["rows"] = []
            out.append(record)
        return out

    @router.get(
        "/sql/{query_id}",
        summary="One SQL query and its answer",
        response_model=SqlAnswer,
        responses=errors.responses(400, 404),
    )
    async def get_sql(query_id: str = QueryId) -> dict[str, Any]:
        return await load(query_id)

    @router.get(
        "/sql/{query_id}/csv",
        summary="One SQL query's rows as CSV",
        response_class=Response,
        responses={**errors.responses(400, 404), 200: {"content": {"text/csv": {}}}},
    )
    async def get_sql_csv(query_id: str = QueryId) -> Response:
        record = await load(query_id)
        return Response(
            csv_text(record),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="folio-query-{query_id}.csv"'},
        )

    return router
