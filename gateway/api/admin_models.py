"""The OpenAPI description of the admin routes' request bodies and admin-only parameters.

Owns: the JSON Schemas of every admin request body (pydantic models used for the
document only, and the scalar bodies), ``request_body`` (the ``openapi_extra``
that declares a hand-read body) and the annotated admin path/query parameters
that are not names (roles, bundles, ids, counts, times). Rules:
- the routes keep reading bodies by hand (``admin_common.read_json``, which also
  takes curl's default form content type) and parsing them with the pure parsers
  (``gateway.meta.policies``, ``gateway.meta.topics``, ``gateway.api.admin_bodies``);
  each schema here says exactly what its parser accepts: Pulsar's field names,
  ranges (Java ``int``/``long``), enums, required fields, ``null`` = default,
  unknown fields ignored, and the cross-field rules JSON Schema can state
  (``if``/``then``/``else``, which client generators ignore - an ``anyOf`` at a
  model's top would turn the model into a union for them). What it cannot state
  is in the description: 412 for a backlog
  quota beyond the retention, 400 for bundle boundaries out of order. Quorums in
  order (ack <= write <= ensemble, integers up to 16) are stated with
  ``dependentSchemas`` of one ``if``/``then`` per bound (``_at_most``);
- integers are JSON integers or whole-number floats (``3.0``), as JSON Schema and
  Jackson read them (``read_json`` turns whole floats into ints);
- parameters FastAPI validates (ids, counts, times, the quota type) are answered
  400; a role is checked by ``policies.parse_role`` (400); a bundle or a topic
  named ``partitioned`` does not match the route (``admin_common`` convertors).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.config import JsonDict

from coordination.analytics_run import INTERVAL_MAX_S
from gateway.meta.bundle_policy import BUNDLES_MAX
from gateway.meta.persistence import ENSEMBLE_MAX, MARK_DELETE_RATE_MAX
from gateway.meta.policies import AUTH_ACTIONS, ROLES_MAX, TOPIC_GRANTS_MAX
from gateway.names import PARTITIONS_MAX, TOPIC_MAX
from gateway.protocol.webhook_config import BOUNDS as WEBHOOK_BOUNDS
from gateway.protocol.webhook_config import (
    DEAD_LETTER_PATTERN,
    HEADER_NAME_PATTERN,
    HEADER_VALUE_PATTERN,
    HEADERS_MAX,
    URL_MAX,
    URL_PATTERN,
)
from gateway.subscription_type import SubscriptionType
from storage.formats.message_id import INT32_MAX, INT64_MAX
from storage.formats.positions import Position

JSON = "application/json"
INT32_MIN = -(2**31)
INT64_MIN = -(2**63)
ROLE_MAX = 256
# policies.parse_role: 1..256 characters, none of them a control character below 0x20; in a
# path also no "/" and not "." or ".." (a URL cannot carry those as one segment)
ROLE_PATTERN = r"^[^\x00-\x1f]+$"
ROLE_PATH_PATTERN = r"^(?!\.\.?$)[^\x00-\x1f/]+$"
BOUNDARY_PATTERN = r"^0[xX][0-9a-fA-F]{1,8}$"
BUNDLE_PATTERN = r"^0x[0-9a-f]{8}_0x[0-9a-f]{8}$"
EARLIEST_OR_LATEST_PATTERN = r"^(?:[Ee][Aa][Rr][Ll][Ii][Ee][Ss][Tt]|[Ll][Aa][Tt][Ee][Ss][Tt])$"
NOT_SET: dict[str, Any] = {"enum": [0, None]}  # 0, null or absent

# the parsers' choices (gateway.meta.policies), as types; tests/unit/test_admin_models.py keeps them equal
QuotaType = Literal["destination_storage", "message_age"]
QuotaPolicy = Literal["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]
TopicType = Literal["non-partitioned", "partitioned"]
Action = Literal["produce", "consume", "functions", "sources", "sinks", "packages"]


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _int_schema(low: int, high: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high}


# ------------------------------------------------------------------ tenants


class TenantInfo(BaseModel):
    """Pulsar ``TenantInfo`` (``null`` or absent lists are empty; other fields are ignored)."""

    adminRoles: list[str] | None = Field(None, description="roles that administer the tenant")
    allowedClusters: list[str] | None = Field(
        None, description="clusters the tenant may use (Folio is one cluster, `folio`; stored as given)"
    )


# ------------------------------------------------------------------ namespace policies


class RetentionPolicies(BaseModel):
    """Keep acknowledged data this long / this much: -1 unlimited, 0 none. Both 0 (or
    null/absent) disables retention; otherwise neither may be 0 (use -1 for "no limit")."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"retentionTimeInMinutes": NOT_SET}},
            "then": {"properties": {"retentionSizeInMB": NOT_SET}},
            "else": {
                "required": ["retentionSizeInMB"],
                "properties": {"retentionSizeInMB": {"not": NOT_SET}},
            },
        }
    )

    retentionTimeInMinutes: int | None = Field(None, ge=-1, le=INT32_MAX, description="minutes")
    retentionSizeInMB: int | None = Field(None, ge=-1, le=INT64_MAX, description="megabytes")


_LEGACY_LIMIT: dict[str, Any] = {
    "anyOf": [{"type": "integer", "minimum": -1, "maximum": INT64_MAX}, {"type": "null"}],
    "deprecated": True,
    "description": "Pulsar's legacy name of limitSize, read only when limitSize is absent",
}


class BacklogQuota(BaseModel):
    """A limit on the unacknowledged backlog (-1, null or absent: no limit)."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"required": ["limitSize"]},
            "else": {"properties": {"limit": _LEGACY_LIMIT}},
        }
    )

    limitSize: int | None = Field(None, ge=-1, le=INT64_MAX, description="bytes")
    limitTime: int | None = Field(None, ge=-1, le=INT32_MAX, description="seconds")
    policy: QuotaPolicy | None = Field(
        None, description="what happens at the limit (default producer_request_hold)"
    )


class AutoTopicCreationOverride(BaseModel):
    """Whether using a topic creates it, and as which type; ``partitioned`` needs
    ``defaultNumPartitions`` of at least 1."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"required": ["topicType"], "properties": {"topicType": {"const": "partitioned"}}},
            "then": {
                "required": ["defaultNumPartitions"],
                "properties": {"defaultNumPartitions": {"type": "integer", "minimum": 1}},
            },
        }
    )

    allowAutoTopicCreation: bool
    topicType: TopicType | None = Field(None, description="default non-partitioned")
    defaultNumPartitions: int | None = Field(None, ge=0, le=PARTITIONS_MAX)


def _at_most(bound: str, bounded: str) -> JsonDict:
    """``bounded <= bound`` for two integers of 1..ENSEMBLE_MAX, in JSON Schema (which
    cannot compare fields): for each k, if ``bound`` <= k then ``bounded`` <= k."""
    return {
        "allOf": [
            {"if": {"properties": {bound: {"maximum": k}}}, "then": {"properties": {bounded: {"maximum": k}}}}
            for k in range(1, ENSEMBLE_MAX)
        ]
    }


class PersistencePolicies(BaseModel):
    """Pulsar ``PersistencePolicies``: ensemble size E, write quorum Qw and ack quorum Qa
    of the ledgers the namespace's topics create from now on (existing ledgers keep
    theirs). Needs 1 <= bookkeeperAckQuorum <= bookkeeperWriteQuorum <=
    bookkeeperEnsemble <= 16 (400 otherwise). A ledger needing more writable storage
    nodes than there are fails like any other (503 not_enough_nodes)."""

    model_config = ConfigDict(
        json_schema_extra={
            "dependentSchemas": {
                "bookkeeperEnsemble": _at_most("bookkeeperEnsemble", "bookkeeperWriteQuorum"),
                "bookkeeperWriteQuorum": _at_most("bookkeeperWriteQuorum", "bookkeeperAckQuorum"),
            }
        }
    )

    bookkeeperEnsemble: int = Field(ge=1, le=ENSEMBLE_MAX, description="E: storage nodes per ledger")
    bookkeeperWriteQuorum: int = Field(ge=1, le=ENSEMBLE_MAX, description="Qw: copies of each entry")
    bookkeeperAckQuorum: int = Field(
        ge=1, le=ENSEMBLE_MAX, description="Qa: copies fsynced before a publish is acknowledged"
    )
    managedLedgerMaxMarkDeleteRate: float | None = Field(
        None,
        ge=0,
        le=MARK_DELETE_RATE_MAX,
        description="stored and returned, not used (Folio persists cursors in batches); null = 0",
    )


class BundlesData(BaseModel):
    """The namespace's bundles: a count (default 4), or explicit boundaries - strictly
    increasing from 0x00000000 to 0xffffffff, one more than ``numBundles`` when both
    are given (400 otherwise)."""

    numBundles: int | None = Field(None, ge=1, le=BUNDLES_MAX)
    boundaries: list[Annotated[str, Field(pattern=BOUNDARY_PATTERN)]] | None = Field(
        None, min_length=2, max_length=BUNDLES_MAX + 1, examples=[["0x00000000", "0x80000000", "0xffffffff"]]
    )


# role -> actions (policies._parse_auth); null means no roles
NAMESPACE_AUTH: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "maxProperties": ROLES_MAX,
            "propertyNames": {"minLength": 1, "maxLength": ROLE_MAX, "pattern": ROLE_PATTERN},
            "additionalProperties": {"type": "array", "items": {"enum": list(AUTH_ACTIONS)}},
        },
        {"type": "null"},
    ],
    "default": None,
    "description": f"role (1-{ROLE_MAX} characters, no control characters) -> actions, at most "
    f"{ROLES_MAX} roles; null means no roles",
}


class AuthPolicies(BaseModel):
    """Pulsar ``AuthPolicies``: ``namespace_auth`` (role -> actions) and
    ``destination_auth`` (full topic name -> role -> actions) are kept."""

    namespace_auth: Annotated[Any, WithJsonSchema(NAMESPACE_AUTH)] = None
    destination_auth: Annotated[
        Any,
        WithJsonSchema(
            {
                "anyOf": [
                    {
                        "type": "object",
                        "maxProperties": TOPIC_GRANTS_MAX,
                        "additionalProperties": NAMESPACE_AUTH,
                    },
                    {"type": "null"},
                ]
            }
        ),
    ] = None
    subscription_auth_roles: Any = Field(None, description="accepted and ignored")


SchemaStrategy = Literal[
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
]
SCHEMA_STRATEGY: dict[str, Any] = {"enum": list(SchemaStrategy.__args__)}  # type: ignore[attr-defined]


class Policies(BaseModel):
    """Pulsar ``Policies`` for a new namespace (``null`` or absent = default; other
    fields are ignored). A backlog quota beyond the retention it would outlive is
    answered 412."""

    bundles: BundlesData | None = None
    retention_policies: RetentionPolicies | None = None
    message_ttl_in_seconds: int | None = Field(None, ge=0, le=INT64_MAX, description="0 = no TTL")
    backlog_quota_map: dict[QuotaType, BacklogQuota] | None = None
    deduplicationEnabled: bool | None = None
    max_consumers_per_subscription: int | None = Field(None, ge=0, le=INT64_MAX, description="0 = no limit")
    max_producers_per_topic: int | None = Field(None, ge=0, le=INT64_MAX, description="0 = no limit")
    max_consumers_per_topic: int | None = Field(None, ge=0, le=INT64_MAX, description="0 = no limit")
    max_subscriptions_per_topic: int | None = Field(
        None, ge=0, le=INT64_MAX, description="0 = no limit; null = the gateway's setting"
    )
    max_topics_per_namespace: int | None = Field(
        None, ge=0, le=INT64_MAX, description="0 = no limit; null = the gateway's setting"
    )
    autoTopicCreationOverride: AutoTopicCreationOverride | None = None
    auth_policies: AuthPolicies | None = None
    persistence: PersistencePolicies | None = None
    schema_compatibility_strategy: SchemaStrategy | None = Field(None, description="UNDEFINED = FULL")
    is_allow_auto_update_schema: bool | None = Field(None, description="may producers add versions (true)")


# ------------------------------------------------------------------ cursors


class ResetCursorData(BaseModel):
    """Pulsar ``ResetCursorData`` / ``MessageId``: both ids >= 0 name a message; both
    negative mean earliest; both Long.MAX_VALUE mean latest."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"ledgerId": {"minimum": 0}}},
            "then": {"properties": {"entryId": {"minimum": 0}}},
            "else": {"properties": {"entryId": {"maximum": -1}}},
        }
    )

    ledgerId: int = Field(ge=INT64_MIN, le=INT64_MAX)
    entryId: int = Field(ge=INT64_MIN, le=INT64_MAX)
    partitionIndex: int = Field(
        -1, ge=INT32_MIN, le=INT32_MAX, description="accepted (the path names the topic)"
    )
    batchIndex: int = Field(
        -1,
        ge=INT32_MIN,
        le=INT32_MAX,
        description="the message within a batch entry (< 0: the entry's first)",
    )
    isExcluded: bool = Field(False, description="start after the message instead of at it")
    excluded: bool = Field(False, description="Jackson's name of isExcluded (isExcluded wins)")
    properties: Any = Field(None, description="accepted and ignored")


def _bounded(name: str, description: str) -> Any:
    default, low, high = WEBHOOK_BOUNDS[name]
    return Field(default, ge=low, le=high, description=description)


class WebhookSettings(BaseModel):
    """A push subscription (Folio extension): the gateway that owns the topic POSTs its
    messages to ``url``; a 2xx answer acknowledges them, anything else is retried."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        ...,
        max_length=URL_MAX,
        pattern=URL_PATTERN,
        description="absolute http:// or https:// URL (host name or IPv4 address), printable ASCII",
    )
    subscriptionType: SubscriptionType = SubscriptionType.SHARED
    initialPosition: Literal["Latest", "Earliest"] = Field(
        "Latest", description="where a subscription created by this call starts"
    )
    maxMessages: int = _bounded("maxMessages", "messages per POST (at most 4 MiB of payloads)")
    maxInFlight: int = _bounded("maxInFlight", "POSTs at once (1 keeps the order)")
    timeoutMs: int = _bounded("timeoutMs", "a POST not answered by then failed")
    minBackoffMs: int = _bounded("minBackoffMs", "wait after a failure, doubling...")
    maxBackoffMs: int = _bounded("maxBackoffMs", "... capped at this (even below minBackoffMs)")
    maxAttempts: int = _bounded(
        "maxAttempts", "failed attempts before the messages go to the dead-letter topic (0: never)"
    )
    deadLetterTopic: str | None = Field(
        None,
        description="a non-partitioned topic of the same namespace that takes the messages after maxAttempts "
        "(not the topic itself); null: <topic>-<subscription>-DLQ",
        json_schema_extra={  # the parser's pattern (a look-ahead: pydantic's own regex has none)
            "anyOf": [
                {"type": "string", "maxLength": TOPIC_MAX, "pattern": DEAD_LETTER_PATTERN},
                {"type": "null"},
            ]
        },
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=HEADERS_MAX,
        description="sent with every POST (values are never shown back)",
        json_schema_extra={
            "propertyNames": {"pattern": HEADER_NAME_PATTERN},
            "additionalProperties": {"type": "string", "pattern": HEADER_VALUE_PATTERN},
        },
    )


CURSOR_TARGET: dict[str, Any] = {
    "anyOf": [
        _ref(ResetCursorData),
        {"type": "string", "pattern": EARLIEST_OR_LATEST_PATTERN, "description": "earliest or latest"},
    ]
}

ADMIN_REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    TenantInfo,
    Policies,
    RetentionPolicies,
    BacklogQuota,
    AutoTopicCreationOverride,
    PersistencePolicies,
    ResetCursorData,
    WebhookSettings,
)

# ------------------------------------------------------------------ scalar bodies

PARTITIONS = _int_schema(1, PARTITIONS_MAX)
TTL_SECONDS = _int_schema(0, INT32_MAX)
LIMIT = _int_schema(0, INT32_MAX)
ANALYTICS_INTERVAL = _int_schema(0, INTERVAL_MAX_S)
ENABLED: dict[str, Any] = {"type": "boolean"}
ACTIONS: dict[str, Any] = {"type": "array", "items": {"enum": list(AUTH_ACTIONS)}}


def request_body(
    schema: dict[str, Any] | type[BaseModel], description: str, example: Any, *, required: bool = True
) -> dict[str, Any]:
    """``openapi_extra`` of a route that reads its JSON body by hand."""
    resolved = _ref(schema) if isinstance(schema, type) else schema
    return {
        "requestBody": {
            "required": required,
            "description": description,
            "content": {JSON: {"schema": resolved, "example": example}},
        }
    }


# ------------------------------------------------------------------ parameters

RolePath = Annotated[
    str,
    Path(
        json_schema_extra={"pattern": ROLE_PATH_PATTERN, "minLength": 1, "maxLength": ROLE_MAX},
        description="a role: 1-256 characters, no control characters (400 otherwise); in a path also "
        "no `/` and not `.` or `..`",
    ),
]
BundlePath = Annotated[
    str,
    Path(
        json_schema_extra={"pattern": BUNDLE_PATTERN, "examples": ["0x00000000_0x40000000"]},
        description="a bundle, `0x%08x_0x%08x` as listed by …/bundles",
    ),
]
NodeIdPath = Annotated[
    str,
    Path(
        json_schema_extra={"pattern": r"^[^\s/]+:[0-9]{1,5}$", "examples": ["127.0.0.1:3181"]},
        description="a storage node's id, `host:port` as it registered",
    ),
]
BatchIndexQuery = Annotated[
    int, Query(ge=-1, le=INT32_MAX, description="the message within a batch entry (-1: the entry's first)")
]
# Path parameters after ``admin_common.SubscriptionPath`` / ``TopicPath`` are dependencies
# as those are, so that OpenAPI lists them after the topic's (own parameters come first).


async def _position(n: Annotated[int, Path(ge=1, le=INT32_MAX, description="1-based position")]) -> int:
    return n


async def _count(count: Annotated[int, Path(ge=0, le=INT32_MAX, description="messages")]) -> int:
    return count


async def _seconds(seconds: Annotated[int, Path(ge=0, le=INT32_MAX, description="seconds")]) -> int:
    return seconds


async def _timestamp(
    timestamp: Annotated[int, Path(ge=0, le=INT64_MAX, description="epoch milliseconds")],
) -> int:
    return timestamp


async def _entry(
    ledger: Annotated[int, Path(ge=0, le=INT64_MAX, description="ledger id")],
    entry: Annotated[int, Path(ge=0, le=INT64_MAX, description="entry id within the ledger")],
) -> Position:
    return Position(ledger, entry)


PositionPath = Annotated[int, Depends(_position)]
EntryPath = Annotated[Position, Depends(_entry)]
CountPath = Annotated[int, Depends(_count)]
SecondsPath = Annotated[int, Depends(_seconds)]
TimestampPath = Annotated[int, Depends(_timestamp)]
QuotaTypeQuery = Annotated[
    QuotaType,
    Query(alias="backlogQuotaType", description="which backlog quota"),
]
