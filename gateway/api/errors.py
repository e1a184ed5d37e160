"""The one place where typed errors become HTTP statuses and WebSocket close codes.

Owns: ``STATUS_BY_CODE`` (error ``code`` -> HTTP status) and ``close_code``
(HTTP status -> WebSocket close code). Rules (docs/architecture.md §7, docs/compatibility.md
§1.3-1.4): 400 bad input, 404 unknown, 409 conflicts, 412 invalid names
(admin), 413 too large, 429/503 backpressure and moved topics, 503 for a
gateway that cannot reach another (``PEER_FAILURES``: forward, relay and
partition fan-out alike), 500 else;
error bodies are ``{"reason": "...", "code": "..."}``. WebSocket sessions are
closed with ``4000 + status/100*100 + n``-style codes in the valid private
range: 4000 + Pulsar's WebSocketError number for protocol errors, and
4400/4404/4409/4413/4429/4503 mirroring the HTTP status for the rest, so a
client can tell "reconnect later" (4503, 4429) from "fix your request" (44xx).
Requests FastAPI cannot validate are 400 and requests no route serves are
Starlette's 404/405 - with the same ``ErrorBody`` (``validation_response``,
``http_error_response``); OpenAPI declares each route's errors with
``responses(...)``, never FastAPI's 422.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import httpx
import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response
from websockets.exceptions import InvalidMessage

from coordination.errors import CoordinationError
from gateway.errors import GatewayError
from storage.errors import StorageError
from storage.formats.errors import FormatError

STATUS_BY_CODE: dict[str, int] = {
    # names and metadata
    "invalid_name": 412,
    "invalid_argument": 400,
    "invalid_policy": 400,
    "not_found": 404,
    "forbidden": 403,
    "conflict": 409,
    "already_exists": 409,
    "precondition_failed": 412,
    "corrupt_metadata": 500,
    # schemas
    "invalid_schema": 400,
    "schema_mismatch": 400,
    "schema_not_found": 404,
    "incompatible_schema": 409,
    "schema_history_full": 409,
    # protocol
    "invalid_params": 400,
    "invalid_frame": 400,
    "bad_request": 400,
    "protocol_error": 400,
    "invalid_message_id": 400,
    "invalid_message": 400,
    "payload_too_large": 413,
    "message_too_large": 413,
    "too_large": 413,
    # broker
    "producer_busy": 409,
    "consumer_busy": 409,
    "subscription_type_mismatch": 409,
    "topic_terminated": 412,
    "not_allowed": 400,
    "too_many_requests": 429,
    "topic_unavailable": 503,
    "topic_fenced": 503,
    "duplicate_undetermined": 503,
    "sequence_gap": 503,
    "sequence_abandoned": 409,
    "backlog_quota_exceeded": 503,
    "log_error": 503,
    # ownership, coordination, storage
    "no_gateway_available": 503,
    "bundle_unavailable": 503,
    "ownership_session_lost": 503,
    "metadata_unavailable": 503,
    "compare_failed": 503,
    "lease_lost": 503,
    "not_enough_nodes": 503,
    "quorum_lost": 503,
    "node_unavailable": 503,
    "owner_unreachable": 503,
    # analytics
    "query_failed": 400,
    "analytics_unavailable": 503,
    "ledger_fenced": 503,
}

AnyError = GatewayError | FormatError | CoordinationError | StorageError


class ErrorBody(BaseModel):
    """The one error model of every HTTP error response."""

    reason: str = Field(description="what is wrong, for a human")
    code: str = Field(description="machine-readable error code, e.g. not_found, conflict, invalid_name")


_DESCRIPTIONS = {
    400: "Bad request",
    404: "Not found",
    405: "Not allowed in this state",
    409: "Conflict",
    412: "Invalid name or precondition failed",
    413: "Too large",
    429: "Too many requests",
    500: "Internal error",
    503: "Unavailable, retry later",
}

# codes of the errors Starlette raises itself (no route ran: unknown path, wrong method)
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` for a route: each status declared with ``ErrorBody``
    (503 is always added: any route may find etcd or the owner unavailable)."""
    wanted = sorted({*statuses, 503})
    return {s: {"model": ErrorBody, "description": _DESCRIPTIONS.get(s, "Error")} for s in wanted}


# failing to reach another gateway (connection refused or reset, timeout, or hung up in the
# middle of a WebSocket handshake: InvalidMessage): the owner may be dying and its bundles
# move once its lease ends - retryable, whichever path met it
PEER_FAILURES: tuple[type[BaseException], ...] = (OSError, httpx.TransportError, InvalidMessage)
OWNER_UNREACHABLE_RETRY_S = 1  # Retry-After of a 503 owner_unreachable: the topic may move meanwhile


def code_of(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        return code
    return "owner_unreachable" if isinstance(exc, PEER_FAILURES) else "internal_error"


def status_of(exc: BaseException) -> int:
    status = STATUS_BY_CODE.get(code_of(exc))
    if status is not None:
        return status
    return 503 if getattr(exc, "retriable", False) else 500


def close_code(status: int) -> int:
    """WebSocket close code for an HTTP-like status (valid private range 4000-4999)."""
    return 4000 + status if 400 <= status < 600 else 4500


def protocol_close_code(ws_code: int | None) -> int:
    """Close code for Pulsar's WebSocketError ``ws_code`` (default 3, unparseable frame)."""
    return 4000 + (ws_code or 3)


def body(exc: BaseException) -> dict[str, Any]:
    code = code_of(exc)
    reason = str(exc) or type(exc).__name__
    if code == "owner_unreachable" and not hasattr(exc, "code"):
        reason = f"owning gateway unreachable: {exc!r}"
    return {"reason": reason, "code": code}


def error_response(exc: BaseException, status: int | None = None) -> Response:
    response = Response(
        orjson.dumps(body(exc)), status_code=status or status_of(exc), media_type="application/json"
    )
    retry_after_s = getattr(exc, "retry_after_s", None)  # an error that says when to retry
    if retry_after_s is None and code_of(exc) == "owner_unreachable":
        retry_after_s = OWNER_UNREACHABLE_RETRY_S
    if isinstance(retry_after_s, int):
        response.headers["Retry-After"] = str(retry_after_s)
    return response


def http_error_response(status: int, detail: str, headers: Mapping[str, str] | None = None) -> Response:
    """An error Starlette raised before any route ran (404 path, 405 method), as ``ErrorBody``."""
    response = reason_response(status, detail, _HTTP_CODES.get(status, "http_error"))
    if headers:
        response.headers.update(headers)
    return response


def reason_response(status: int, reason: str, code: str) -> Response:
    return Response(
        orjson.dumps({"reason": reason, "code": code}), status_code=status, media_type="application/json"
    )


def describe_validation_error(exc: RequestValidationError) -> str:
    """One readable sentence for FastAPI's request-validation errors (answered as 400)."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        if error.get("type") == "missing" and tuple(error.get("loc", ())) == ("body",):
            parts.append("a JSON request body is required")
        elif error.get("type") == "json_invalid":
            parts.append(f"request body is not JSON ({error.get('ctx', {}).get('error', 'decode error')})")
        else:
            detail = error.get("ctx", {}).get("error", "")
            parts.append(f"{where}: {error.get('msg', 'invalid')}" + (f" ({detail})" if detail else ""))
    return "; ".join(parts) or "invalid request"


def validation_response(exc: RequestValidationError) -> Response:
    return reason_response(400, describe_validation_error(exc), "invalid_argument")


class ErrorMappingRoute(APIRoute):
    """A route class that maps typed errors and request-validation errors to ``ErrorBody``
    responses inside the route itself, so a router works without app-level handlers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return validation_response(exc)
            except (GatewayError, FormatError, CoordinationError, StorageError) as exc:
                return error_response(exc)

        return run
