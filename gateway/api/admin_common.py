"""What the admin topic, subscription and message routers share (asyncio shell).

Owns: ``AdminRoute`` (typed errors and request-validation errors become
``ErrorBody`` responses inside the route, so the routers also work without the
app's handlers), ``on_owner`` (serve a topic-scoped call on the topic's owner:
here, or forwarded once; or on every partition's owner), path-to-name helpers, JSON
answers, the JSON body reader of every admin route (``read_json``), the topic and the subscription a route's
path names (``NamespacePath`` for ``{tenant}/{namespace}``, ``TopicPath`` for
``{tenant}/{namespace}/{topic}``, ``SubscriptionPath`` for
``…/subscription/{subscription}``: one dependency each) and the URL convertors of path
segments that must not swallow a literal route (``{topic:topic}``,
``{bundle:bundle}``). Rules (docs/architecture.md §6-7): statuses come from
``gateway.api.errors`` only; an admin read never auto-creates a topic (404
instead); a body is JSON whatever its content type (curl's default form type
included), an empty body is no body, a JSON ``null`` body is refused (400), and
a whole-number float (``3.0``) is the integer it spells, as in JSON Schema and
Jackson (the documented schemas are in ``gateway.api.admin_models``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import orjson
from fastapi import Depends, Request
from starlette.convertors import StringConvertor, register_url_convertor
from starlette.responses import Response

from gateway.api.errors import ErrorMappingRoute, reason_response
from gateway.api.paging import TOTAL_HEADER, PageParams
from gateway.api.route_docs import Namespace, Tenant, TopicPart
from gateway.api.route_docs import Subscription as SubscriptionName
from gateway.broker.topic import Topic
from gateway.meta.errors import InvalidArgument
from gateway.names import NamespaceName, TopicName, check_subscription
from gateway.protocol.json_fields import as_int
from gateway.protocol.params import parse_authoritative
from gateway.routing import Peer

if TYPE_CHECKING:
    from gateway.process import Gateway

JSON = "application/json"


class TopicConvertor(StringConvertor):
    """A topic segment that is not a reserved word (``…/{namespace}/partitioned`` is
    the list route, so ``PUT``/``DELETE`` there answer 405 and ``Allow: GET``)."""

    regex = "(?!partitioned(?:/|$))[^/]+"


class BundleConvertor(StringConvertor):
    """A bundle segment, ``0x%08x_0x%08x`` (so ``…/permissions/unload`` stays a role)."""

    regex = "0x[0-9a-f]{8}_0x[0-9a-f]{8}"


register_url_convertor("topic", TopicConvertor())
register_url_convertor("bundle", BundleConvertor())

PREFIX = "/admin/v2/persistent/{tenant}/{namespace}"
TOPIC_ROOT = f"{PREFIX}/{{topic:topic}}"  # the topic itself (beside PREFIX/partitioned)
TOPIC = f"{PREFIX}/{{topic}}"  # the routes below a topic (…/stats, …/subscriptions)
SUBSCRIPTION = f"{TOPIC}/subscription/{{subscription}}"


AdminRoute = ErrorMappingRoute  # typed and validation errors -> ErrorBody, inside the route


def json_response(data: Any, status: int = 200, total: int | None = None) -> Response:
    headers = {TOTAL_HEADER: str(total)} if total is not None else None
    return Response(orjson.dumps(data), status_code=status, media_type=JSON, headers=headers)


def no_content() -> Response:
    return Response(status_code=204)


def paged(response: Response, paging: PageParams, items: list[str]) -> list[str]:
    """A page of ``items`` per ``paging``; the number that matched goes in ``X-Total-Count``."""
    selected, total = paging.apply(items)
    response.headers[TOTAL_HEADER] = str(total)
    return selected


async def namespace_path(tenant: Tenant, namespace: Namespace) -> NamespaceName:
    """The namespace a route's ``{tenant}/{namespace}`` names (412 if malformed). A route
    whose other parameters can fail validation checks the name itself, so that their
    400 still comes before this 412."""
    return NamespaceName.of(tenant, namespace)


NamespacePath = Annotated[NamespaceName, Depends(namespace_path)]


def topic_name(tenant: str, namespace: str, topic: str) -> TopicName:
    return TopicName.of("persistent", tenant, namespace, topic)


async def topic_path(tenant: Tenant, namespace: Namespace, topic: TopicPart) -> TopicName:
    """The persistent topic a route's ``{tenant}/{namespace}/{topic}`` names (412 if malformed)."""
    return topic_name(tenant, namespace, topic)


# FastAPI documents an endpoint's own parameters before its dependencies': a query
# parameter of a route that takes a ``TopicPath`` is listed before the path's three.
TopicPath = Annotated[TopicName, Depends(topic_path)]


@dataclass(frozen=True, slots=True)
class SubscriptionRef:
    """A subscription as a route's path names it: its topic and its checked name."""

    topic: TopicName
    name: str


async def subscription_ref(
    tenant: Tenant, namespace: Namespace, topic: TopicPart, subscription: SubscriptionName
) -> SubscriptionRef:
    """The topic's name is checked before the subscription's (412 either way)."""
    return SubscriptionRef(topic_name(tenant, namespace, topic), check_subscription(subscription))


# A path parameter after it is a dependency too (``admin_models.CountPath`` ...): FastAPI
# documents an endpoint's own parameters before its dependencies'.
SubscriptionPath = Annotated[SubscriptionRef, Depends(subscription_ref)]


async def read_json(request: Request, *, required: bool = True) -> Any:
    """The request body as JSON, whatever its content type (``decode_json``)."""
    return decode_json(await request.body(), required=required)


def decode_json(body: bytes, *, required: bool = True) -> Any:
    """``body`` as JSON; None for an empty body (``InvalidArgument`` if ``required``).
    Whole-number floats become ints; a JSON ``null`` is refused (so is a bare,
    unquoted ``latest``: not JSON)."""
    text = body.strip()
    if not text:
        if required:
            raise InvalidArgument("a JSON request body is required")
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"request body is not JSON: {exc}") from exc
    if value is None:
        raise InvalidArgument("the request body is JSON null: send a value, or no body")
    return whole_numbers(value)


def whole_numbers(value: Any) -> Any:
    """``value`` with every whole-number float (``3.0``, within 2^53) as an int."""
    if isinstance(value, float):
        number = as_int(value)
        return value if number is None else number
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


Serve = Callable[[Topic], Awaitable[Response]]


async def partition_count(gateway: Gateway, name: TopicName) -> int:
    """The partitions of topic ``name``; 0 for a partition or a non-partitioned topic."""
    return 0 if name.is_partition else await gateway.router.partitions(name)


async def on_owner(
    gateway: Gateway,
    request: Request,
    name: TopicName,
    serve: Serve,
    *,
    body: Any = None,
    create: bool = False,
    subscription: str | None = None,
    each_partition: bool = False,
) -> Response:
    """Run ``serve`` with the loaded topic on its owner, or forward the request
    there (with ``body`` re-encoded as JSON). ``subscription``, when given, must
    name an existing subscription (404 otherwise). With ``each_partition``, a
    partitioned topic's call is ``on_partitions`` (every partition does it)."""
    if each_partition:
        count = await partition_count(gateway, name)
        if count:
            return await on_partitions(gateway, request, name, count, body)
    if subscription is not None:
        check_subscription(subscription)
    authoritative = parse_authoritative(request.query_params)
    where = await gateway.router.serve(name, authoritative=authoritative, create=create)
    if isinstance(where, Peer):
        content = b"" if body is None else orjson.dumps(body)
        return await gateway.forwarder.replay(where, request, content)
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
        owner = await gateway.router.owner(part)
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
