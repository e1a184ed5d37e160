"""Typed errors of the metadata layer (tenants, namespaces, policies, topic existence).

Owns: the errors ``gateway.meta`` raises on purpose. Rule (docs/architecture.md §11): each has
a stable ``code`` and ``retriable``; the HTTP status is chosen at the edge from the
code (``gateway/api/admin_namespaces.py``): invalid_argument/invalid_policy 400,
not_found 404, conflict 409, precondition_failed 412, corrupt_metadata 500.
"""

from __future__ import annotations

from gateway.errors import GatewayError


class InvalidArgument(GatewayError, code="invalid_argument"):
    """A request argument is malformed or out of range (e.g. a partition count of 0)."""


class InvalidPolicy(InvalidArgument, code="invalid_policy"):
    """A policy value (or a request body carrying one) is malformed or out of range."""


class NotFound(GatewayError, code="not_found"):
    """The tenant, namespace or topic named does not exist."""


class Conflict(GatewayError, code="conflict"):
    """The request conflicts with the current metadata (HTTP 409)."""


class AlreadyExists(Conflict):
    """Something to be created exists already (tenant, namespace, topic)."""


class NotEmpty(Conflict):
    """A tenant still has namespaces, or a namespace still has topics."""


class PreconditionFailed(GatewayError, code="precondition_failed"):
    """The request is well formed but the current state forbids it (e.g. fewer
    partitions than now, a backlog quota larger than the retention)."""


class CorruptMetadata(GatewayError, code="corrupt_metadata"):
    """A value stored in etcd under a gateway key cannot be decoded (a bug or a
    foreign writer); the request fails rather than guessing."""
