"""Typed errors of bundle ownership and lookup.

Owns: the ``OwnershipError`` subtree of ``GatewayError``. Rule: every class has a
stable ``code`` and ``retriable``; the HTTP/WS edge maps codes to statuses.
"""

from __future__ import annotations

from gateway.errors import GatewayError


class OwnershipError(GatewayError, code="ownership_error"):
    """Base of the errors of bundle ownership and lookup."""


class NoGatewayAvailable(OwnershipError, code="no_gateway_available", retriable=True):
    """No live gateway is registered to own a bundle (cluster starting or all gone)."""


class BundleUnavailable(OwnershipError, code="bundle_unavailable", retriable=True):
    """A bundle's owner is not reachable right now (its registration is gone but its
    ownership key has not expired yet, or ownership is changing). Ask again shortly."""


class OwnershipSessionLost(OwnershipError, code="ownership_session_lost", retriable=True):
    """This gateway's lease is gone: it owns nothing and must start a new session."""
