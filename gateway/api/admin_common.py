"""What the admin topic, subscription and message routers share (asyncio shell).

Owns: ``AdminRoute`` (typed errors and request-validation errors become
``ErrorBody`` responses inside the route, so the routers also work without the
app's handlers), ``on_owner`` (serve a topic-scoped call on the topic's owner:
here, or forwarded once), path-to-name helpers, JSON answers and the JSON
body reader. Rules (DESIGN.md §6-7): statuses come from ``gateway.api.errors``
only; an admin read never auto-creates a topic (404 instead).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.responses import Response

from coordination.errors import CoordinationError
from gateway.api.errors import error_response, reason_response
from gateway.api.forwarding import forward, local_topic
from gateway.api.paging import TOTAL_HEADER
from gateway.broker.topic import Topic
from gateway.errors import GatewayError
from gateway.meta.errors import InvalidArgument
from gateway.names import TopicName, check_subscription
from storage.errors import StorageError

if TYPE_CHECKING:
    from gateway.api.gateway import Gateway

JSON = "application/json"
PREFIX = "/admin/v2/persistent/{tenant}/{namespace}"


def _describe(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


class AdminRoute(APIRoute):
    """Maps errors to ``{"reason", "code"}`` responses inside the route itself."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return reason_response(400, _describe(exc), "invalid_argument")
            except (GatewayError, CoordinationError, StorageError) as exc:
                return error_response(exc)

        return run


def json_response(data: Any, status: int = 200, total: int | None = None) -> Response:
    headers = {TOTAL_HEADER: str(total)} if total is not None else None
    return Response(orjson.dumps(data), status_code=status, media_type=JSON, headers=headers)


def no_content() -> Response:
    return Response(status_code=204)


def topic_name(tenant: str, namespace: str, topic: str) -> TopicName:
    return TopicName.of("persistent", tenant, namespace, topic)


def json_body(value: Any) -> Any:
    """A body FastAPI handed over as bytes (no JSON content type) parsed as JSON;
    a bare ``earliest``/``latest`` is taken as that string."""
    if isinstance(value, bytes | bytearray):
        text = bytes(value).strip()
        if not text:
            return None
        if text in (b"earliest", b"latest"):
            return text.decode()
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InvalidArgument(f"request body is not JSON: {exc}") from exc
    return value


Serve = Callable[[Topic], Awaitable[Response]]


async def on_owner(
    gateway: Gateway,
    request: Request,
    name: TopicName,
    serve: Serve,
    *,
    body: Any = None,
    create: bool = False,
    subscription: str | None = None,
) -> Response:
    """Run ``serve`` with the loaded topic on its owner, or forward the request
    there (with ``body`` re-encoded as JSON). ``subscription``, when given, must
    name an existing subscription (404 otherwise)."""
    if subscription is not None:
        check_subscription(subscription)
    where = await local_topic(gateway, name, dict(request.query_params), create=create)
    if isinstance(where, str):
        content = b"" if body is None else orjson.dumps(body)
        return await forward(gateway, f"{where}{request.url.path}", request, content)
    if subscription is not None and subscription not in where.subscriptions:
        return reason_response(404, f"Subscription {subscription} not found on {name}", "not_found")
    return await serve(where)


async def on_partitions(
    gateway: Gateway, request: Request, name: TopicName, count: int, body: Any
) -> Response:
    """Replay ``request`` (a call on a partitioned topic) on every partition, each on
    its owner; 204 when all succeed, else the first failure's answer."""
    marker = f"/{name.local}/"
    path = request.url.path
    cut = path.index(marker)

    async def one(index: int) -> tuple[int, bytes, str]:
        part = name.partition(index)
        owner = await gateway.route(part)
        url = f"{owner.http_url}{path[:cut]}/{part.local}/{path[cut + len(marker) :]}"
        content = b"" if body is None else orjson.dumps(body)
        upstream = await gateway.http.request(
            request.method,
            url,
            content=content,
            params={**dict(request.query_params), "authoritative": "true"},
            headers={"content-type": JSON},
        )
        return upstream.status_code, upstream.content, upstream.headers.get("content-type", JSON)

    for status, content, media in await asyncio.gather(*(one(i) for i in range(count))):
        if status >= 300:
            return Response(content, status_code=status, media_type=media)
    return no_content()
