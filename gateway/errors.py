"""Typed errors of the gateway package.

Owns: ``GatewayError``, the one base of every error the gateway raises on
purpose, and the subclasses its pure cores need. Rule (docs/architecture.md §11): each
error has a stable ``code`` string and a class attribute ``retriable`` (given as class
keywords: ``class NotFound(GatewayError, code="not_found")``); the
translation to HTTP status and WebSocket close codes happens at the edge only
(added later, in this module, as one mapping keyed by ``code``).
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base of all gateway errors: ``code`` is stable, ``retriable`` says
    whether the same request may succeed later."""

    code = "gateway_error"
    retriable = False

    def __init_subclass__(cls, code: str | None = None, retriable: bool | None = None) -> None:
        """A subclass states its ``code`` / ``retriable`` as class keywords; an omitted one is
        inherited (a subclass may still set them as plain class attributes)."""
        super().__init_subclass__()
        if code is not None:
            cls.code = code
        if retriable is not None:
            cls.retriable = retriable


class CorruptCursorSnapshot(GatewayError, code="corrupt_cursor_snapshot"):
    """A persisted cursor snapshot cannot be restored."""
