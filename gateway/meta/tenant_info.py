"""A tenant's info as a value, with its Pulsar JSON form (pure).

Owns: ``TenantInfo``, the record stored at ``keys.tenant``. Rule: JSON field
names are Pulsar's (``adminRoles``, ``allowedClusters``); a field of the wrong
type is an ``InvalidPolicy`` naming it, ``null`` means empty, unknown fields are
ignored; ``deleted`` is stored only while a delete is under way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.meta.errors import InvalidPolicy
from gateway.meta.policy_fields import json_object, kind_of, stored_json


@dataclass(frozen=True, slots=True)
class TenantInfo:
    """Pulsar TenantInfo; ``deleted`` marks a tenant being deleted (stored only while true)."""

    admin_roles: tuple[str, ...] = ()
    allowed_clusters: tuple[str, ...] = ()
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "adminRoles": list(self.admin_roles),
            "allowedClusters": list(self.allowed_clusters),
        }
        if self.deleted:
            out["deleted"] = True
        return out

    @classmethod
    def from_json(cls, value: Any) -> TenantInfo:
        if value is None:
            return cls()
        obj = json_object(value, "tenant info")
        return cls(
            _strings(obj.get("adminRoles"), "adminRoles"),
            _strings(obj.get("allowedClusters"), "allowedClusters"),
            deleted=obj.get("deleted") is True,
        )

    def encode(self) -> bytes:
        return orjson.dumps(self.to_json())

    @classmethod
    def decode(cls, data: bytes) -> TenantInfo:
        return cls.from_json(stored_json(data, "stored tenant info"))


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidPolicy(f"{what} must be a list of strings, got {kind_of(value)}")
    return tuple(value)
