"""Namespace policies and tenant info as values, with their Pulsar JSON forms (pure).

Owns: ``Policies`` (the namespace policy document stored at ``keys.namespace``),
its parts (``Retention``, ``BacklogQuota``, ``AutoTopicCreation``; ``Bundles``
in ``gateway.meta.bundle_policy``, ``Persistence`` in ``gateway.meta.persistence``)
and the parsers that turn request bodies into these values; ``TenantInfo`` is in
``gateway.meta.tenant_info``.
Rule: JSON field names are Pulsar's (``retention_policies``, ``deduplicationEnabled``,
``autoTopicCreationOverride``, ...); a known field with a wrong type or an
out-of-range value is an ``InvalidPolicy`` naming the field, and so is a
cross-field violation inside one policy (persistence quorums out of order); one
between two policies (backlog quota beyond retention) is ``PreconditionFailed``; unknown
fields (Pulsar clients send many) are ignored and ``null`` means "default".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from coordination.analytics_run import INTERVAL_MAX_S
from gateway.meta.bundle_policy import Bundles
from gateway.meta.errors import InvalidPolicy, PreconditionFailed
from gateway.meta.persistence import Persistence
from gateway.meta.policy_fields import (
    bool_field,
    choice_field,
    int_field,
    json_object,
    kind_of,
    optional_int,
    or_default,
    stored_json,
)
from gateway.meta.schema_compat import Strategy
from gateway.names import PARTITIONS_MAX

BACKLOG_QUOTA_TYPES = ("destination_storage", "message_age")
BACKLOG_QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
TOPIC_TYPES = ("non-partitioned", "partitioned")
AUTH_ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
ROLES_MAX = 1000
TOPIC_GRANTS_MAX = 1000  # topics of one namespace with grants of their own (the value stays small)


# ---------------------------------------------------------------- scalar bodies


def parse_ttl_seconds(value: Any) -> int:
    """Body of POST …/messageTTL: seconds, 0 = off."""
    return int_field(value, "messageTTL (seconds)", 0, 2**31 - 1)


def parse_analytics_interval(value: Any) -> int:
    """Body of POST …/analyticsInterval: seconds between scheduled statistics runs, 0 = on demand."""
    return int_field(value, "analyticsInterval (seconds)", 0, INTERVAL_MAX_S)


def parse_limit(value: Any, what: str) -> int:
    """Body of the max-consumers/max-producers setters: a count, 0 = unlimited."""
    return int_field(value, what, 0, 2**31 - 1)


def parse_enabled(value: Any, what: str) -> bool:
    return bool_field(value, what)


def parse_actions(value: Any) -> tuple[str, ...]:
    """Body of POST …/permissions/{role}: a list of Pulsar ``AuthAction`` names."""
    if not isinstance(value, list):
        raise InvalidPolicy(f"permissions must be a JSON array of actions, got {kind_of(value)}")
    actions: list[str] = []
    for item in value:
        if item not in AUTH_ACTIONS:
            raise InvalidPolicy(f"unknown action {item!r}: expected some of {', '.join(AUTH_ACTIONS)}")
        if item not in actions:
            actions.append(item)
    return tuple(sorted(actions))


def parse_role(role: str) -> str:
    if not role or len(role) > 256 or any(ord(c) < 0x20 for c in role):
        raise InvalidPolicy("a role is 1-256 printable characters")
    return role


def _parse_auth(value: Any) -> dict[str, tuple[str, ...]]:
    if value is None:
        return {}
    namespace_auth = json_object(value, "auth_policies").get("namespace_auth")
    roles = {} if namespace_auth is None else json_object(namespace_auth, "auth_policies.namespace_auth")
    if len(roles) > ROLES_MAX:
        raise InvalidPolicy(f"auth_policies.namespace_auth names more than {ROLES_MAX} roles")
    return {parse_role(str(role)): parse_actions(actions) for role, actions in roles.items()}


def _parse_topic_auth(value: Any) -> dict[str, dict[str, tuple[str, ...]]]:
    """``auth_policies.destination_auth``: full topic name -> role -> actions."""
    if value is None:
        return {}
    raw = json_object(value, "auth_policies").get("destination_auth")
    topics = {} if raw is None else json_object(raw, "auth_policies.destination_auth")
    if len(topics) > TOPIC_GRANTS_MAX:
        raise InvalidPolicy(f"auth_policies.destination_auth names more than {TOPIC_GRANTS_MAX} topics")
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for topic, roles in topics.items():
        if roles is None:
            continue
        grants = json_object(roles, "auth_policies.destination_auth")
        if len(grants) > ROLES_MAX:
            raise InvalidPolicy(f"auth_policies.destination_auth names more than {ROLES_MAX} roles")
        out[str(topic)] = {parse_role(str(role)): parse_actions(actions) for role, actions in grants.items()}
    return out


# ---------------------------------------------------------------- policy parts


@dataclass(frozen=True, slots=True)
class Retention:
    """Keep acknowledged data this long / this much; -1 = unlimited, 0 = none."""

    time_minutes: int = 0
    size_mb: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"retentionTimeInMinutes": self.time_minutes, "retentionSizeInMB": self.size_mb}

    @classmethod
    def from_json(cls, value: Any) -> Retention:
        obj = json_object(value, "retention")
        time_minutes = int_field(
            or_default(obj.get("retentionTimeInMinutes"), 0), "retentionTimeInMinutes", -1, 2**31 - 1
        )
        size_mb = int_field(or_default(obj.get("retentionSizeInMB"), 0), "retentionSizeInMB", -1)
        if (time_minutes == 0) != (size_mb == 0):
            raise InvalidPolicy(
                "retention: a time or size limit of 0 is invalid when the other is not 0; "
                "use -1 to leave one of them unlimited"
            )
        return cls(time_minutes, size_mb)


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """Limit on the unacknowledged backlog; -1 = no limit."""

    limit_size: int = -1  # bytes
    limit_time: int = -1  # seconds
    policy: str = "producer_request_hold"

    def to_json(self) -> dict[str, Any]:
        return {"limitSize": self.limit_size, "limitTime": self.limit_time, "policy": self.policy}

    @classmethod
    def from_json(cls, value: Any) -> BacklogQuota:
        obj = json_object(value, "backlog quota")
        size = obj.get("limitSize", obj.get("limit", -1))  # "limit" is Pulsar's legacy name
        return cls(
            limit_size=int_field(-1 if size is None else size, "limitSize", -1),
            limit_time=int_field(or_default(obj.get("limitTime"), -1), "limitTime", -1, 2**31 - 1),
            policy=choice_field(
                or_default(obj.get("policy"), "producer_request_hold"), "policy", BACKLOG_QUOTA_POLICIES
            ),
        )


@dataclass(frozen=True, slots=True)
class AutoTopicCreation:
    """Whether producers/consumers may create topics by using them, and of which type."""

    allow: bool = True
    topic_type: str = "non-partitioned"
    default_num_partitions: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "allowAutoTopicCreation": self.allow,
            "topicType": self.topic_type,
            "defaultNumPartitions": self.default_num_partitions,
        }

    @classmethod
    def from_json(cls, value: Any) -> AutoTopicCreation:
        obj = json_object(value, "autoTopicCreationOverride")
        if "allowAutoTopicCreation" not in obj:
            raise InvalidPolicy("autoTopicCreationOverride needs allowAutoTopicCreation (true or false)")
        allow = bool_field(obj["allowAutoTopicCreation"], "allowAutoTopicCreation")
        topic_type = choice_field(
            or_default(obj.get("topicType"), "non-partitioned"), "topicType", TOPIC_TYPES
        )
        partitions = obj.get("defaultNumPartitions")
        if topic_type == "partitioned":
            if partitions is None:
                raise InvalidPolicy("topicType partitioned needs defaultNumPartitions (1..1024)")
            partitions = int_field(partitions, "defaultNumPartitions", 1, PARTITIONS_MAX)
        elif partitions is not None:
            partitions = int_field(partitions, "defaultNumPartitions", 0, PARTITIONS_MAX)
        return cls(allow, topic_type, partitions)


# ---------------------------------------------------------------- the policy document


def parse_strategy(value: object) -> Strategy:
    """A ``SchemaCompatibilityStrategy`` name (null: UNDEFINED); ``InvalidPolicy`` otherwise."""
    if value is None:
        return Strategy.UNDEFINED
    if isinstance(value, str) and value in Strategy.__members__:
        return Strategy(value)
    raise InvalidPolicy(
        f"schemaCompatibilityStrategy must be one of {', '.join(Strategy.__members__)}, got {value!r}"
    )


@dataclass(frozen=True, slots=True)
class Policies:
    """One namespace's policies. ``deleted`` marks a namespace being deleted."""

    bundles: Bundles = field(default_factory=Bundles)
    retention: Retention = Retention()
    message_ttl_seconds: int | None = None
    backlog_quotas: Mapping[str, BacklogQuota] = field(default_factory=dict)
    deduplication_enabled: bool | None = None
    max_consumers_per_subscription: int | None = None
    max_producers_per_topic: int | None = None
    max_consumers_per_topic: int | None = None
    # None: the gateway's setting (--max-subscriptions-per-topic, --max-topics-per-namespace); 0: none
    max_subscriptions_per_topic: int | None = None
    max_topics_per_namespace: int | None = None
    auto_topic_creation: AutoTopicCreation = AutoTopicCreation()
    permissions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # role -> actions
    # full name of a (partitioned or plain) topic -> role -> actions: Pulsar's destination_auth
    topic_permissions: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    persistence: Persistence | None = None  # None: the gateway's LogConfig quorums
    schema_compatibility_strategy: Strategy = Strategy.UNDEFINED  # UNDEFINED: FULL (docs/decisions/0009)
    is_allow_auto_update_schema: bool = True  # may a producer add a schema version
    analytics_interval_seconds: int | None = None  # None: the cluster's statistics schedule (0012)
    deleted: bool = False

    @property
    def deduplication(self) -> bool:
        """Effective dedup switch (unset = off, as brokerDeduplicationEnabled=false)."""
        return bool(self.deduplication_enabled)

    def replace(self, **changes: Any) -> Policies:
        return dataclasses.replace(self, **changes)

    def grant(self, role: str, actions: tuple[str, ...]) -> Policies:
        if role not in self.permissions and len(self.permissions) >= ROLES_MAX:
            raise PreconditionFailed(f"a namespace grants permissions to at most {ROLES_MAX} roles")
        return self.replace(permissions={**self.permissions, role: actions})

    def revoke(self, role: str) -> Policies:
        return self.replace(permissions={r: a for r, a in self.permissions.items() if r != role})

    def grant_on_topic(self, topic: str, role: str, actions: tuple[str, ...]) -> Policies:
        roles = self.topic_permissions.get(topic, {})
        if topic not in self.topic_permissions and len(self.topic_permissions) >= TOPIC_GRANTS_MAX:
            raise PreconditionFailed(f"a namespace holds grants for at most {TOPIC_GRANTS_MAX} topics")
        if role not in roles and len(roles) >= ROLES_MAX:
            raise PreconditionFailed(f"a topic grants permissions to at most {ROLES_MAX} roles")
        return self.replace(topic_permissions={**self.topic_permissions, topic: {**roles, role: actions}})

    def revoke_on_topic(self, topic: str, role: str | None = None) -> Policies:
        """Revoke ``role``'s grant on ``topic`` (every role's when None: the topic is deleted)."""
        roles = {r: a for r, a in self.topic_permissions.get(topic, {}).items() if role not in (None, r)}
        others = {t: r for t, r in self.topic_permissions.items() if t != topic}
        return self.replace(topic_permissions={**others, topic: roles} if roles else others)

    def topic_actions(self, topic: str, role: str) -> tuple[str, ...]:
        return self.topic_permissions.get(topic, {}).get(role, ())

    def to_json(self) -> dict[str, Any]:
        return {
            "bundles": self.bundles.to_json(),
            "retention_policies": self.retention.to_json(),
            "message_ttl_in_seconds": self.message_ttl_seconds,
            "backlog_quota_map": {kind: q.to_json() for kind, q in sorted(self.backlog_quotas.items())},
            "deduplicationEnabled": self.deduplication_enabled,
            "max_consumers_per_subscription": self.max_consumers_per_subscription,
            "max_producers_per_topic": self.max_producers_per_topic,
            "max_consumers_per_topic": self.max_consumers_per_topic,
            "max_subscriptions_per_topic": self.max_subscriptions_per_topic,
            "max_topics_per_namespace": self.max_topics_per_namespace,
            "autoTopicCreationOverride": self.auto_topic_creation.to_json(),
            "auth_policies": {
                "namespace_auth": {role: list(actions) for role, actions in sorted(self.permissions.items())},
                "destination_auth": {
                    topic: {role: list(actions) for role, actions in sorted(roles.items())}
                    for topic, roles in sorted(self.topic_permissions.items())
                },
                "subscription_auth_roles": {},
            },
            "persistence": None if self.persistence is None else self.persistence.to_json(),
            "schema_compatibility_strategy": self.schema_compatibility_strategy.value,
            "is_allow_auto_update_schema": self.is_allow_auto_update_schema,
            "analyticsIntervalSeconds": self.analytics_interval_seconds,
            "deleted": self.deleted,
        }

    @classmethod
    def from_json(cls, value: Any) -> Policies:
        obj = json_object(value, "policies")
        policies = cls(
            bundles=Bundles() if obj.get("bundles") is None else Bundles.from_json(obj["bundles"]),
            retention=_maybe(obj.get("retention_policies"), Retention.from_json, Retention()),
            message_ttl_seconds=optional_int(obj.get("message_ttl_in_seconds"), "message_ttl_in_seconds"),
            backlog_quotas=parse_backlog_quota_map(obj.get("backlog_quota_map")),
            deduplication_enabled=(
                None
                if obj.get("deduplicationEnabled") is None
                else bool_field(obj["deduplicationEnabled"], "deduplicationEnabled")
            ),
            max_consumers_per_subscription=optional_int(
                obj.get("max_consumers_per_subscription"), "max_consumers_per_subscription"
            ),
            max_producers_per_topic=optional_int(
                obj.get("max_producers_per_topic"), "max_producers_per_topic"
            ),
            max_consumers_per_topic=optional_int(
                obj.get("max_consumers_per_topic"), "max_consumers_per_topic"
            ),
            max_subscriptions_per_topic=optional_int(
                obj.get("max_subscriptions_per_topic"), "max_subscriptions_per_topic"
            ),
            max_topics_per_namespace=optional_int(
                obj.get("max_topics_per_namespace"), "max_topics_per_namespace"
            ),
            auto_topic_creation=_maybe(
                obj.get("autoTopicCreationOverride"), AutoTopicCreation.from_json, AutoTopicCreation()
            ),
            permissions=_parse_auth(obj.get("auth_policies")),
            topic_permissions=_parse_topic_auth(obj.get("auth_policies")),
            persistence=_maybe(obj.get("persistence"), Persistence.from_json, None),
            schema_compatibility_strategy=parse_strategy(obj.get("schema_compatibility_strategy")),
            is_allow_auto_update_schema=(
                True
                if obj.get("is_allow_auto_update_schema") is None
                else bool_field(obj["is_allow_auto_update_schema"], "is_allow_auto_update_schema")
            ),
            analytics_interval_seconds=optional_int(
                obj.get("analyticsIntervalSeconds"), "analyticsIntervalSeconds"
            ),
            deleted=bool(obj.get("deleted") is True),
        )
        check_quotas_within_retention(policies)
        return policies

    def encode(self) -> bytes:
        return orjson.dumps(self.to_json())

    @classmethod
    def decode(cls, data: bytes) -> Policies:
        return cls.from_json(stored_json(data, "stored policies record"))


def _maybe(value: Any, parse: Any, default: Any) -> Any:
    return default if value is None else parse(value)


def parse_backlog_quota_map(value: Any) -> dict[str, BacklogQuota]:
    if value is None:
        return {}
    obj = json_object(value, "backlog_quota_map")
    return {
        choice_field(kind, "backlog quota type", BACKLOG_QUOTA_TYPES): BacklogQuota.from_json(quota)
        for kind, quota in obj.items()
    }


def check_quotas_within_retention(policies: Policies) -> None:
    """Pulsar refuses a backlog quota larger than the retention it would outlive."""
    size = policies.backlog_quotas.get("destination_storage")
    retention = policies.retention
    if size is not None and retention.size_mb > 0 and size.limit_size > retention.size_mb * 1024 * 1024:
        raise PreconditionFailed(
            f"backlog quota limitSize {size.limit_size} bytes exceeds the retention size "
            f"{retention.size_mb} MB; raise the retention or lower the quota"
        )
    age = policies.backlog_quotas.get("message_age")
    if age is not None and retention.time_minutes > 0 and age.limit_time > retention.time_minutes * 60:
        raise PreconditionFailed(
            f"backlog quota limitTime {age.limit_time} s exceeds the retention time "
            f"{retention.time_minutes} min; raise the retention or lower the quota"
        )
