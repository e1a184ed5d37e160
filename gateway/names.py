"""Topic, namespace and tenant names (pure).

Owns: parsing and validating ``persistent://tenant/namespace/topic`` names and
their REST/WebSocket path forms, partition names (``<topic>-partition-<n>``)
and the encoding of a name as an etcd key segment. Rule (docs/architecture.md §4): names
are validated (characters, lengths) and are never turned into file paths; a
name that fails validation is a ``InvalidName`` (HTTP 400/412 at the edge).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.errors import GatewayError

DOMAINS = ("persistent", "non-persistent")
PARTITION_SUFFIX = "-partition-"
PARTITIONS_MAX = 1024
NAME_MAX = 128  # tenant, namespace
TOPIC_MAX = 255  # local topic name, partition suffix included
SUBSCRIPTION_MAX = 255
RESERVED_TOPICS = ("partitioned",)  # admin path words in a topic's place
# a partitioned topic's base name: "<base>-partition-1023" still fits TOPIC_MAX
PARTITIONED_TOPIC_MAX = TOPIC_MAX - len(f"{PARTITION_SUFFIX}{PARTITIONS_MAX - 1}")

_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=:\-]*$")
_TOPIC = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=:\-]*$")
_SUBSCRIPTION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=:\-]*$")


class InvalidName(GatewayError):
    """A tenant, namespace, topic or subscription name is malformed."""

    code = "invalid_name"


def _check(kind: str, value: str, pattern: re.Pattern[str], limit: int) -> str:
    if not value or len(value) > limit or not pattern.match(value) or ".." in value:
        raise InvalidName(
            f"Invalid {kind} name {value[:80]!r}: use letters, digits and _ . = : - "
            f"(not starting with . or -), at most {limit} characters"
        )
    return value


def check_tenant(tenant: str) -> str:
    return _check("tenant", tenant, _SEGMENT, NAME_MAX)


def check_namespace_part(namespace: str) -> str:
    return _check("namespace", namespace, _SEGMENT, NAME_MAX)


def check_subscription(name: str) -> str:
    return _check("subscription", name, _SUBSCRIPTION, SUBSCRIPTION_MAX)


@dataclass(frozen=True, slots=True, order=True)
class NamespaceName:
    tenant: str
    namespace: str

    @classmethod
    def of(cls, tenant: str, namespace: str) -> NamespaceName:
        return cls(check_tenant(tenant), check_namespace_part(namespace))

    @classmethod
    def parse(cls, text: str) -> NamespaceName:
        parts = text.split("/")
        if len(parts) != 2:
            raise InvalidName(f"Invalid namespace {text[:80]!r}: expected tenant/namespace")
        return cls.of(parts[0], parts[1])

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


@dataclass(frozen=True, slots=True, order=True)
class TopicName:
    """A validated topic name; ``local`` may carry a ``-partition-N`` suffix."""

    domain: str
    tenant: str
    namespace: str
    local: str

    @classmethod
    def of(cls, domain: str, tenant: str, namespace: str, local: str) -> TopicName:
        if domain not in DOMAINS:
            raise InvalidName(f"Invalid domain {domain[:40]!r}: expected persistent or non-persistent")
        check_tenant(tenant)
        check_namespace_part(namespace)
        _check("topic", local, _TOPIC, TOPIC_MAX)
        name = cls(domain, tenant, namespace, local)
        base, index = _split_partition(local)
        if index is not None and (index >= PARTITIONS_MAX or not base):
            raise InvalidName(f"Invalid partition suffix in {local[:80]!r}")
        if base in RESERVED_TOPICS:
            raise InvalidName(f"Invalid topic name {local!r}: {base!r} is reserved (an admin path word)")
        return name

    @classmethod
    def parse(cls, text: str) -> TopicName:
        """``persistent://t/ns/topic``, or the short ``t/ns/topic`` / ``topic`` (public/default)."""
        domain = "persistent"
        rest = text
        if "://" in text:
            domain, rest = text.split("://", 1)
        parts = rest.split("/")
        if len(parts) == 1 and "://" not in text:
            parts = ["public", "default", parts[0]]
        if len(parts) != 3:
            raise InvalidName(f"Invalid topic name {text[:80]!r}: expected domain://tenant/namespace/topic")
        return cls.of(domain, parts[0], parts[1], parts[2])

    @property
    def namespace_name(self) -> NamespaceName:
        return NamespaceName(self.tenant, self.namespace)

    @property
    def partition_index(self) -> int:
        """Index of this partition, or -1 for a topic that is not a partition."""
        _, index = _split_partition(self.local)
        return -1 if index is None else index

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself if not a partition)."""
        base, index = _split_partition(self.local)
        return self if index is None else TopicName(self.domain, self.tenant, self.namespace, base)

    def check_partitioned_base(self) -> TopicName:
        """This name, if it can name a partitioned topic: no ``-partition-`` in it and
        short enough for every partition's name; else ``InvalidName``."""
        if PARTITION_SUFFIX in self.local:
            raise InvalidName(f"Partitioned topic name {self} must not contain {PARTITION_SUFFIX!r}")
        if len(self.local) > PARTITIONED_TOPIC_MAX:
            raise InvalidName(
                f"Partitioned topic name {self.local[:80]!r}... is longer than {PARTITIONED_TOPIC_MAX} "
                "characters: its partitions' names would exceed the topic name limit"
            )
        return self

    def sibling(self, local: str) -> TopicName:
        """The topic ``local`` of this topic's domain, tenant and namespace."""
        return TopicName.of(self.domain, self.tenant, self.namespace, local)

    def partition(self, index: int) -> TopicName:
        if self.is_partition:
            raise InvalidName(f"{self} is already a partition")
        if not 0 <= index < PARTITIONS_MAX:
            raise InvalidName(f"partition index {index} out of range")
        return TopicName.of(
            self.domain, self.tenant, self.namespace, f"{self.local}{PARTITION_SUFFIX}{index}"
        )

    @property
    def path(self) -> str:
        """``persistent/tenant/namespace/topic`` as in REST and WebSocket URLs."""
        return f"{self.domain}/{self.tenant}/{self.namespace}/{self.local}"

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"


def _split_partition(local: str) -> tuple[str, int | None]:
    head, sep, tail = local.rpartition(PARTITION_SUFFIX)
    if not sep or not tail.isdigit() or (len(tail) > 1 and tail[0] == "0"):
        return local, None
    return head, int(tail)
