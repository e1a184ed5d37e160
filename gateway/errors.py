"""Typed errors of the gateway package.

Owns: ``GatewayError``, the one base of every error the gateway raises on
purpose, and the subclasses its pure cores need. Rule (style.md §3c): each
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


class MessageIdError(GatewayError):
    """A message id (base64, string form or fields) is malformed or out of range."""

    code = "invalid_message_id"


class InvalidMessage(GatewayError):
    """A message to publish has a field outside the entry format's bounds."""

    code = "invalid_message"


class MessageTooLarge(InvalidMessage):
    """One message does not fit in an entry even on its own."""

    code = "message_too_large"


class CorruptEntry(GatewayError):
    """A ledger entry's payload is not a valid batch (docs/decisions/0004)."""

    code = "corrupt_entry"


class CorruptCursorSnapshot(GatewayError):
    """A persisted cursor snapshot cannot be restored."""

    code = "corrupt_cursor_snapshot"
