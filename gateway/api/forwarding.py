"""Where a topic-scoped REST call is served: here (the owner) or forwarded (asyncio shell).

Owns: ``local_topic`` (the loaded topic if this gateway owns it, else the
owner's URL), ``forward`` (replay a request on the owner, answer with its
answer) and ``get_json`` (a fan-out call to another gateway). Rules (docs/architecture.md
§6): any gateway accepts any request; the owner of the topic's bundle serves
it; a non-owner forwards once, with ``authoritative=true`` so the owner never
bounces it again; response headers that pass through a forward are the
content type, ``X-Pulsar-*`` ones and ``X-Total-Count``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.api.http_io import pass_headers
from gateway.broker.broker_errors import OwnershipMovedWhileLoading
from gateway.broker.topic import Topic
from gateway.names import TopicName

if TYPE_CHECKING:
    from gateway.api.gateway import Gateway


_NOT_FORWARDED = ("host", "content-length", "origin")
LOOKUP_ATTEMPTS = 3  # lookups of one request whose topic moved while it loaded
log = logging.getLogger(__name__)

LocalTopic = Callable[[TopicName, dict[str, str]], Awaitable[Topic | str]]  # ``local_topic`` of one gateway


def authoritative(query: dict[str, str]) -> bool:
    return query.get("authoritative", "false").lower() == "true"


async def local_topic(
    gateway: Gateway, name: TopicName, query: dict[str, str], *, create: bool = True
) -> Topic | str:
    """The loaded topic if this gateway owns it (loading it, auto-creating it only
    if ``create``), else the owner's base URL. When the topic's bundle moves while
    it loads (the load is discarded), the owner is looked up again, at most
    ``LOOKUP_ATTEMPTS`` times in all, so a REST caller sees a 503 only after that."""
    for attempt in range(1, LOOKUP_ATTEMPTS + 1):
        owner = await gateway.route(name, authoritative=authoritative(query))
        if not owner.is_self:
            return owner.http_url
        try:
            return await gateway.service.topic(name, create=create)
        except OwnershipMovedWhileLoading:
            if attempt == LOOKUP_ATTEMPTS:
                raise
            log.info("topic %s moved while it loaded; looking it up again (%d)", name, attempt)
    raise AssertionError("unreachable")


async def owner_url(gateway: Gateway, name: TopicName, query: dict[str, str]) -> str | None:
    """The owner's base URL, or None if this gateway owns the topic."""
    owner = await gateway.route(name, authoritative=authoritative(query))
    return None if owner.is_self else owner.http_url


async def forward(gateway: Gateway, url: str, request: Request, body: bytes) -> Response:
    """Replay ``request`` on ``url`` (another gateway) and answer with its answer."""
    # the caller's credentials go along (the owner re-checks them); its Origin was checked here
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
    params = {**dict(request.query_params), "authoritative": "true"}
    upstream = await gateway.http.request(request.method, url, content=body, headers=headers, params=params)
    passed = pass_headers(upstream.headers)
    total = upstream.headers.get("x-total-count")
    if total is not None:
        passed["X-Total-Count"] = total
    return Response(upstream.content, status_code=upstream.status_code, headers=passed)


async def get_json(gateway: Gateway, url: str, params: dict[str, str] | None = None) -> tuple[int, Any]:
    """GET ``url`` on another gateway (authoritative): its status and JSON body."""
    upstream = await gateway.http.get(url, params={**(params or {}), "authoritative": "true"})
    try:
        body = upstream.json()
    except ValueError:
        body = {"reason": upstream.text}
    return upstream.status_code, body
