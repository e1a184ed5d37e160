"""Typed errors of the gateway package.

Owns: ``GatewayError``, the one base of every error the gateway raises on
purpose, and the subclasses its pure cores need. Rule (docs/architecture.md §11): each
error has a stable ``code`` string and a class attribute ``retriable``; the
translation to HTTP status and WebSocket close codes happens at the edge only
(added later, in this module, as one mapping keyed by ``code``).
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base of all gateway errors: ``code`` is stable, ``retriable`` says
    whether the same request may succeed later."""

    code = "gateway_error"
    retriable = False


class CorruptCursorSnapshot(GatewayError):
    """A persisted cursor snapshot cannot be restored."""

    code = "corrupt_cursor_snapshot"
