"""Cluster metadata the gateways share through etcd: tenants, namespaces and their
policies, partitioned-topic counts and topic existence (docs/decisions/0005)."""

from gateway.meta.bundle_policy import Bundles
from gateway.meta.errors import (
    AlreadyExists,
    Conflict,
    CorruptMetadata,
    InvalidArgument,
    InvalidPolicy,
    NotEmpty,
    NotFound,
    PreconditionFailed,
)
from gateway.meta.namespaces import DEFAULT_NAMESPACE, DEFAULT_TENANT, NamespaceStore
from gateway.meta.persistence import Persistence
from gateway.meta.policies import AutoTopicCreation, BacklogQuota, Policies, Retention
from gateway.meta.tenant_info import TenantInfo

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TENANT",
    "AlreadyExists",
    "AutoTopicCreation",
    "BacklogQuota",
    "Bundles",
    "Conflict",
    "CorruptMetadata",
    "InvalidArgument",
    "InvalidPolicy",
    "NamespaceStore",
    "NotEmpty",
    "NotFound",
    "Persistence",
    "Policies",
    "PreconditionFailed",
    "Retention",
    "TenantInfo",
]
