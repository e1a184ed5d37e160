"""The schema registry: every schema version of a topic, in one etcd key.

Owns: ``SchemaRegistry`` (read, add, delete versions of a topic's schema) and
``SchemaVersion`` (one stored version). Rules (docs/decisions/0010-schema-registry.md):
- key ``keys.schemas(<base topic path>)`` holds ``{"versions":[...]}``; a
  partitioned topic's partitions share their base topic's schema;
- versions count from 0 and are never reused; DELETE appends a tombstone
  version (Pulsar's rule), after which a new lineage starts and compatibility
  is checked only against versions after the last tombstone;
- adding a schema equal to a live version returns that version (no new one);
  else it must be compatible under the namespace's strategy, and a producer
  may add one only while ``isAllowAutoUpdateSchema`` is true;
- every change is a compare-and-swap of the one key, retried on conflict, so
  two gateways adding at once get distinct, ordered versions;
- a topic's history is bounded by ``HISTORY_BYTES_MAX`` (etcd's value limit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from coordination import keys
from coordination.store import MetadataStore
from gateway.errors import GatewayError
from gateway.meta.schema_compat import Strategy, is_compatible
from gateway.meta.schema_types import SchemaInfo, SchemaType, schema_info
from gateway.names import TopicName

HISTORY_BYTES_MAX = 1024 * 1024  # all versions of one topic (etcd keeps values well below 1.5 MiB)
CAS_ATTEMPTS = 32


class SchemaNotFound(GatewayError, code="schema_not_found"):
    """The topic has no schema, or not the version asked for."""


class IncompatibleSchema(GatewayError, code="incompatible_schema"):
    """A new schema is not compatible with the topic's live versions under its strategy."""


class SchemaHistoryFull(GatewayError, code="schema_history_full"):
    """The topic's schema versions would pass ``HISTORY_BYTES_MAX``."""


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    version: int
    info: SchemaInfo
    timestamp_ms: int
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "type": self.info.type.value,
            "data": self.info.definition,
            "properties": dict(self.info.properties),
            "timestamp": self.timestamp_ms,
            "deleted": self.deleted,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SchemaVersion:
        if obj.get("deleted"):
            return cls(int(obj["version"]), SchemaInfo(SchemaType.BYTES), int(obj["timestamp"]), True)
        info = schema_info(obj["type"], obj.get("data", ""), obj.get("properties"))
        return cls(int(obj["version"]), info, int(obj["timestamp"]))

    def response(self) -> dict[str, Any]:
        """Pulsar's ``GetSchemaResponse``."""
        return {
            "version": self.version,
            "type": self.info.type.value,
            "timestamp": self.timestamp_ms,
            "data": self.info.definition,
            "properties": dict(self.info.properties),
        }


def _decode(value: bytes | None) -> list[SchemaVersion]:
    if not value:
        return []
    return [SchemaVersion.from_json(v) for v in orjson.loads(value)["versions"]]


def _encode(versions: list[SchemaVersion]) -> bytes:
    return orjson.dumps({"versions": [v.to_json() for v in versions]})


def live_lineage(versions: list[SchemaVersion]) -> list[SchemaVersion]:
    """The versions after the last tombstone (the current lineage), oldest first."""
    start = 0
    for index, version in enumerate(versions):
        if version.deleted:
            start = index + 1
    return versions[start:]


class SchemaRegistry:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    @staticmethod
    def _key(topic: TopicName) -> str:
        return keys.schemas(topic.base.path)

    async def versions(self, topic: TopicName) -> list[SchemaVersion]:
        """Every version, tombstones included, oldest first."""
        kv = await self._store.get(self._key(topic))
        return _decode(kv.value if kv else None)

    async def latest(self, topic: TopicName) -> SchemaVersion:
        """The current schema; ``SchemaNotFound`` when none (or the last was deleted)."""
        versions = await self.versions(topic)
        if not versions or versions[-1].deleted:
            raise SchemaNotFound(f"Schema not found for {topic.base}")
        return versions[-1]

    async def version(self, topic: TopicName, version: int) -> SchemaVersion:
        for stored in await self.versions(topic):
            if stored.version == version and not stored.deleted:
                return stored
        raise SchemaNotFound(f"Schema version {version} not found for {topic.base}")

    async def check(self, topic: TopicName, info: SchemaInfo, strategy: Strategy) -> bool:
        lineage = [v.info for v in live_lineage(await self.versions(topic))]
        return any(info.same_as(v) for v in lineage) or is_compatible(strategy, lineage, info)

    async def add(
        self, topic: TopicName, info: SchemaInfo, strategy: Strategy, now_ms: int, *, may_add: bool = True
    ) -> int:
        """The version of ``info``: an equal live version, else a new compatible one.
        ``IncompatibleSchema`` if it may not follow; with ``may_add`` False (a producer
        while isAllowAutoUpdateSchema is off) only an existing version is returned."""
        key = self._key(topic)
        for _ in range(CAS_ATTEMPTS):
            kv = await self._store.get(key)
            versions = _decode(kv.value if kv else None)
            lineage = live_lineage(versions)
            for stored in reversed(lineage):
                if stored.info.same_as(info):
                    return stored.version
            if not may_add and lineage:
                raise IncompatibleSchema(
                    f"{topic.base} has no such schema and the namespace does not allow "
                    "producers to add one (isAllowAutoUpdateSchema is false)"
                )
            if not is_compatible(strategy, [v.info for v in lineage], info):
                raise IncompatibleSchema(
                    f"the {info.type.value} schema is incompatible with {topic.base}'s schema "
                    f"under the {strategy.effective().value} strategy"
                )
            number = versions[-1].version + 1 if versions else 0
            value = _encode([*versions, SchemaVersion(number, info, now_ms)])
            if len(value) > HISTORY_BYTES_MAX:
                raise SchemaHistoryFull(
                    f"{topic.base}'s schema history would exceed {HISTORY_BYTES_MAX} bytes"
                )
            if await self._store.compare_and_swap(key, value, kv.mod_revision if kv else 0) is not None:
                return number
        raise GatewayError(f"gave up adding a schema to {topic.base} after {CAS_ATTEMPTS} conflicting writes")

    async def delete(self, topic: TopicName, now_ms: int) -> int:
        """Append a tombstone; returns its version. ``SchemaNotFound`` if there is no schema."""
        key = self._key(topic)
        for _ in range(CAS_ATTEMPTS):
            kv = await self._store.get(key)
            versions = _decode(kv.value if kv else None)
            if not versions or versions[-1].deleted:
                raise SchemaNotFound(f"Schema not found for {topic.base}")
            number = versions[-1].version + 1
            tombstone = SchemaVersion(number, SchemaInfo(SchemaType.BYTES), now_ms, deleted=True)
            value = _encode([*versions, tombstone])
            if len(value) > HISTORY_BYTES_MAX:  # keep only the tombstone: nothing before it is live
                value = _encode([tombstone])
            if kv is not None and await self._store.compare_and_swap(key, value, kv.mod_revision) is not None:
                return number
        raise GatewayError(f"gave up deleting {topic.base}'s schema after {CAS_ATTEMPTS} conflicting writes")
