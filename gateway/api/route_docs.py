"""The OpenAPI description of the messaging routes: parameters, bodies, responses, tags.

Owns: the annotated parameter types of routes.py and of the admin routers (path
names with their documented rules, the HTTP-consume query parameters) and each messaging
route's decorator arguments (``HEALTH``, ``LOOKUP``, ``PRODUCE``, ``FETCH``,
``ACK``...: tags, summary, documented response model, declared error
statuses, hand-parsed request bodies). Rules: route handlers keep parsing by
hand (``gateway.protocol``); what FastAPI validates here (``max``, ``waitMs``,
``partition``, the consume query enums and ``consumerName``) is answered 400
with ``ErrorBody``; names are documented with their pattern and checked by
``TopicName`` (412, as Pulsar); every error status is declared with
``errors.responses``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, Path, Query
from starlette.responses import Response

from gateway.api import messaging_models as s
from gateway.api.errors import responses
from gateway.api.http_consume import FETCH_MAX
from gateway.api.paging import LIMIT_MAX, OFFSET_MAX, SEARCH_MAX, PageParams
from gateway.names import TopicName
from gateway.protocol.params import NAME_CHARS_MAX
from gateway.subscription_type import SubscriptionType

JSON = "application/json"

Max = Annotated[int, Query(ge=1, le=FETCH_MAX, description="most messages to return")]
Wait = Annotated[int, Query(ge=0, le=60_000, description="long-poll wait in ms")]
# path parameters: documented with the name rules; checked by TopicName (412/400 as Pulsar)
Domain = Annotated[str, Path(json_schema_extra=s.DOMAIN_SCHEMA, description="persistent or non-persistent")]
Tenant = Annotated[str, Path(json_schema_extra=s.TENANT_SCHEMA, description=s.NAME_RULE)]
Namespace = Annotated[str, Path(json_schema_extra=s.NAMESPACE_SCHEMA, description=s.NAME_RULE)]
TopicPart = Annotated[str, Path(json_schema_extra=s.TOPIC_SCHEMA, description=s.TOPIC_RULE)]
# a partition's name is "<topic>-partition-<n>" within the 255-character limit
PartitionedTopic = Annotated[
    str,
    Path(
        max_length=s.PARTITIONED_TOPIC_MAX,
        json_schema_extra=s.PARTITIONED_TOPIC_SCHEMA,
        description=f"{s.TOPIC_RULE}; not a partition's name; at most {s.PARTITIONED_TOPIC_MAX} characters",
    ),
]
# the base name of a partitioned topic an admin call creates or grows (checked by
# TopicName.check_partitioned_base: 412)
PartitionedBase = Annotated[
    str,
    Path(
        json_schema_extra=s.PARTITIONED_BASE_SCHEMA,
        description=f"{s.TOPIC_RULE}; no `-partition-` in it; at most {s.PARTITIONED_TOPIC_MAX} characters",
    ),
]
Subscription = Annotated[str, Path(json_schema_extra=s.SUBSCRIPTION_SCHEMA, description=s.NAME_RULE)]
Cluster = Annotated[
    str, Path(json_schema_extra=s.CLUSTER_SCHEMA, description="a cluster; Folio is the one cluster `folio`")
]


@dataclass(frozen=True, slots=True)
class TopicRef:
    """What a messaging route's ``{domain}/{tenant}/{namespace}/{topic}`` names, as sent:
    checked inside the route (``topic_name``), so a bad name is answered as the route's
    other errors and after FastAPI's own 400s."""

    domain: str
    tenant: str
    namespace: str
    topic: str

    def topic_name(self) -> TopicName:
        return TopicName.of(self.domain, self.tenant, self.namespace, self.topic)


async def topic_ref(domain: Domain, tenant: Tenant, namespace: Namespace, topic: TopicPart) -> TopicRef:
    return TopicRef(domain, tenant, namespace, topic)


TopicRefPath = Annotated[TopicRef, Depends(topic_ref)]


@dataclass(frozen=True, slots=True)
class ConsumeRef(TopicRef):
    """What ``/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}`` names, as
    sent (checked inside the route, as ``TopicRef``)."""

    subscription: str


async def consume_ref(
    domain: Domain, tenant: Tenant, namespace: Namespace, topic: TopicPart, subscription: Subscription
) -> ConsumeRef:
    return ConsumeRef(domain, tenant, namespace, topic, subscription)


ConsumePath = Annotated[ConsumeRef, Depends(consume_ref)]
Authoritative = Annotated[
    bool, Query(description="set by a gateway forwarding to the owner: do not redirect again")
]
MarkDuplicates = Annotated[
    bool,
    Query(
        alias="markDuplicates",
        description='Folio: a message deduplication dropped is answered with `"duplicate": true` '
        "(without it the reply is Pulsar's: errorCode 0 and message id -1:-1)",
    ),
]
SubscriptionTypeQuery = Annotated[
    SubscriptionType,
    Query(description="type of the subscription (HTTP consumers default to Shared)"),
]
InitialPositionQuery = Annotated[
    Literal["Latest", "Earliest"], Query(description="where a new subscription starts")
]
ConsumerNameQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=NAME_CHARS_MAX,
        pattern=s.PRINTABLE_NAME_PATTERN,
        description="this HTTP consumer (its unacked messages); default `http`",
    ),
]
NackDelayQuery = Annotated[
    int,
    Query(
        ge=0,
        le=2**31 - 1,
        description="Pulsar's consumer setting: ms before a nacked message is redelivered (default "
        "60000). Taken when the HTTP consumer is created (its first fetch or stream); the ack and "
        "nack calls use the consumer's setting",
    ),
]
TEXT_OK: dict[int | str, dict[str, Any]] = {
    200: {"description": "ok", "content": {"text/plain": {"schema": {"type": "string", "examples": ["ok"]}}}}
}
# Raw-body headers declared as parameters: only those any value of is valid. The others
# (X-Pulsar-producer-name, -sequence-id, -event-time, -deliver-at-time, -deliver-after-ms,
# -PROPERTY-<name>) are checked only for a raw body - a JSON body ignores them - which a
# parameter schema cannot say; the request body's description lists them.
RAW_HEADERS = [
    ("X-Pulsar-partition-key", "raw body: the message key (routing, Key_Shared)"),
    ("X-Pulsar-context", "raw body: accepted (REST replies carry no context)"),
]
PRODUCE_EXTRA: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "JSON `ProducerMessages` (PIP-64), or the raw payload bytes of one message "
        "(any other content type), answered with one `ProducerAck`. A raw body's metadata comes from "
        "headers: `X-Pulsar-partition-key`, `X-Pulsar-producer-name`, `X-Pulsar-sequence-id`, "
        "`X-Pulsar-event-time` and `X-Pulsar-deliver-at-time` (epoch ms or ISO-8601), "
        "`X-Pulsar-deliver-after-ms`, `X-Pulsar-PROPERTY-<name>` (a property).",
        "content": {
            JSON: {"schema": {"$ref": "#/components/schemas/ProducerMessages"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    },
    "parameters": [
        {"name": name, "in": "header", "required": False, "schema": {"type": "string"}, "description": text}
        for name, text in RAW_HEADERS
    ],
}


def ack_extra(description: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {JSON: {"schema": {"$ref": "#/components/schemas/AckRequest"}}},
        }
    }


HEALTH: dict[str, Any] = {
    "tags": ["health"],
    "summary": "`ok` while this gateway serves (503 when closing or its etcd session is lost)",
    "response_class": Response,
    "responses": {**TEXT_OK, **responses()},
}
LOOKUP: dict[str, Any] = {
    "tags": ["lookup"],
    "summary": "The gateway that serves a topic",
    "response_model": s.LookupData,
    "responses": responses(404, 412),
}
LOOKUP_BUNDLE: dict[str, Any] = {
    "tags": ["lookup"],
    "summary": "The namespace bundle a topic belongs to, e.g. `0x40000000_0x80000000`",
    "response_model": str,
    "responses": responses(404, 412),
}
PRODUCE: dict[str, Any] = {
    "tags": ["produce"],
    "summary": "Publish messages (JSON ProducerMessages) or one raw-body message",
    "response_model": s.ProducerAcks | s.ProducerAck,
    "responses": responses(400, 404, 409, 412, 413, 500),
    "openapi_extra": PRODUCE_EXTRA,
}
PRODUCE_PARTITION: dict[str, Any] = {
    **PRODUCE,
    "summary": "Publish to one partition of a partitioned topic",
}
FETCH: dict[str, Any] = {
    "tags": ["consume"],
    "summary": "Long-poll for messages of a subscription (creates it on first use)",
    "response_model": s.FetchResponse,
    "responses": responses(400, 404, 409, 412),
}
STREAM: dict[str, Any] = {
    "tags": ["consume"],
    "summary": "Stream messages of a subscription as server-sent events (creates it on first use)",
    "response_class": Response,
    "responses": {
        200: {
            "description": "`text/event-stream`: an `event: consumer` naming the consumer to ack as, "
            "then one `event: message` per message (`id:` its message id, `data:` the JSON object a "
            "WebSocket consumer receives); a comment line every 15 s of silence",
            "content": {
                "text/event-stream": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "event": {"enum": ["consumer", "message"]},
                            "id": {"type": "string", "description": "message events: the message id"},
                            "data": {"type": "string", "contentMediaType": JSON},
                        },
                        "required": ["event", "data"],
                    }
                }
            },
        },
        307: {"description": "another gateway owns the topic: the same request there (`Location`)"},
        **responses(400, 404, 409, 412),
    },
}
ACK: dict[str, Any] = {
    "tags": ["consume"],
    "summary": "Acknowledge fetched messages",
    "response_model": s.AckResult,
    "responses": responses(400, 404, 409, 412, 413),
    "openapi_extra": ack_extra("ids of fetched messages to acknowledge"),
}
NACK: dict[str, Any] = {
    "tags": ["consume"],
    "summary": "Negatively acknowledge fetched messages (redelivered later)",
    "response_model": s.NackResult,
    "responses": responses(400, 404, 409, 412, 413),
    "openapi_extra": ack_extra("ids of fetched messages to redeliver"),
}


def consumer_query(
    subscriptionType: SubscriptionTypeQuery = SubscriptionType.SHARED,
    subscriptionInitialPosition: InitialPositionQuery = "Latest",
    consumerName: ConsumerNameQuery = None,
    negativeAckRedeliveryDelay: NackDelayQuery = 60_000,
    authoritative: Authoritative = False,
) -> None:
    """The query parameters that attach an HTTP consumer, shared by the fetch and stream
    routes: declared and validated here; the handlers read them with ``pull_params``."""


ConsumerQuery = Depends(consumer_query)  # dependencies=[ConsumerQuery] of FETCH and STREAM


# ---------------------------------------------------------------- paging of list routes


def page_params(
    search: Annotated[
        str | None,
        Query(max_length=SEARCH_MAX, description="only items containing this text (case-insensitive)"),
    ] = None,
    offset: Annotated[int, Query(ge=0, le=OFFSET_MAX, description="matching items to leave out first")] = 0,
    limit: Annotated[
        int | None, Query(ge=0, le=LIMIT_MAX, description=f"most items to answer (at most {LIMIT_MAX})")
    ] = None,
) -> PageParams:
    return PageParams(search, offset, limit)


Paging = Annotated[PageParams, Depends(page_params)]
