"""The one way a gateway talks HTTP to a peer gateway on a topic's behalf (asyncio shell).

Owns: ``Forwarder`` - replaying a REST request on the topic's owner and answering
with its answer, a GET to a peer (fan-out of admin reads), a REST publish of
messages to the owner of a topic (the parts of a partitioned publish, and the
broker's publishes to topics owned elsewhere: dead letters, retry letters).
Rules (docs/architecture.md §6-7):
- every call it makes carries ``authoritative=true``: the owner serves it and
  never bounces it again;
- the caller's credentials go along with a replayed request (the owner checks
  them again); its Host, Content-Length and Origin do not (the Origin was
  checked here); the response headers that come back are the content type,
  ``X-Pulsar-*`` ones and ``X-Total-Count``;
- a published body is the REST producer body of ``storage.formats.producer_messages``,
  the one codec of it.
Where a topic is served is asked of ``gateway.routing``, never decided here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from gateway.broker.topic import Topic
from gateway.names import TopicName
from gateway.routing import Peer, Router
from storage.formats import producer_messages
from storage.formats.entry_format import EntryMessage

_NOT_FORWARDED = ("host", "content-length", "origin")


def _pass_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a peer's answer that go back to the client."""
    return {
        k: v for k, v in headers.items() if k.lower() in ("content-type",) or k.lower().startswith("x-pulsar")
    }


class Forwarder:
    """Calls on peer gateways, over one HTTP client (kept by the gateway process)."""

    def __init__(self, http: httpx.AsyncClient, router: Router) -> None:
        self._http = http
        self._router = router

    async def replay(self, peer: Peer, request: Request, body: bytes) -> Response:
        """Replay ``request`` on ``peer`` (same path) and answer with its answer."""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        params = {**dict(request.query_params), "authoritative": "true"}
        upstream = await self._http.request(
            request.method, f"{peer.url}{request.url.path}", content=body, headers=headers, params=params
        )
        passed = _pass_headers(upstream.headers)
        total = upstream.headers.get("x-total-count")
        if total is not None:
            passed["X-Total-Count"] = total
        return Response(upstream.content, status_code=upstream.status_code, headers=passed)

    async def get_json(self, peer: Peer, path: str, params: dict[str, str] | None = None) -> tuple[int, Any]:
        """GET ``path`` on ``peer`` (authoritative): its status and JSON body."""
        upstream = await self._http.get(
            f"{peer.url}{path}", params={**(params or {}), "authoritative": "true"}
        )
        try:
            body = upstream.json()
        except ValueError:
            body = {"reason": upstream.text}
        return upstream.status_code, body

    async def publish(
        self, peer: Peer, name: TopicName, body: dict[str, Any], params: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """POST a REST producer ``body`` to ``name`` on ``peer``: its ``messagePublishResults``
        (none when it answered without them: the caller counts them)."""
        results: list[dict[str, Any]] = (
            (await self._post(peer, name, body, params)).json().get("messagePublishResults", [])
        )
        return results

    async def _post(
        self, peer: Peer, name: TopicName, body: dict[str, Any], params: dict[str, str] | None
    ) -> httpx.Response:
        return await self._http.post(
            f"{peer.url}/topics/{name.path}", json=body, params={**(params or {}), "authoritative": "true"}
        )

    async def publish_entry(self, topic: str, message: EntryMessage) -> None:
        """Publish one message to ``topic`` wherever it is served (the broker's publishes
        to topics that may be owned elsewhere: dead letters)."""
        name = TopicName.parse(topic)
        where = await self._router.serve(name)
        if isinstance(where, Topic):
            await where.publish(message)
            return
        body = producer_messages.body(
            message.producer_name,
            [
                producer_messages.message(
                    message.payload,
                    key=message.key.decode("utf-8", "replace") if message.key is not None else None,
                    properties=dict(message.properties),
                )
            ],
        )
        response = await self._post(where, name, body, None)
        response.raise_for_status()
        result = response.json()["messagePublishResults"][0]
        if result.get("errorCode", 0):
            raise RuntimeError(f"publish to {name} failed: {result.get('errorMsg')}")
