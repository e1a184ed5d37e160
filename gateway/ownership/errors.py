"""Typed errors of bundle ownership and lookup.

Owns: the ``OwnershipError`` subtree of ``GatewayError``. Rule: every class has a
stable ``code`` and ``retriable``; the HTTP/WS edge maps codes to statuses.
"""

from __future__ import annotations

from gateway.errors import GatewayError


class OwnershipError(GatewayError):
    code = "ownership_error"


class NoGatewayAvailable(OwnershipError):
    """No live gateway is registered to own a bundle (cluster starting or all gone)."""

    code = "no_gateway_available"
    retriable = True


class BundleUnavailable(OwnershipError):
    """A bundle's owner is not reachable right now (its registration is gone but its
    ownership key has not expired yet, or ownership is changing). Ask again shortly."""

    code = "bundle_unavailable"
    retriable = True


class OwnershipSessionLost(OwnershipError):
    """This gateway's lease is gone: it owns nothing and must start a new session."""

    code = "ownership_session_lost"
    retriable = True
