"""Typed errors of the shared log formats.

Owns: ``FormatError``, the base of every error the codecs in ``storage.formats``
raise, and its subclasses. Rule (as ``gateway.errors``): each error has a stable
``code`` string and a class attribute ``retriable``; the gateway maps codes to
HTTP statuses and WebSocket close codes at its edge, Spark lets them fail a task.
"""

from __future__ import annotations


class FormatError(Exception):
    """Base of the format errors: ``code`` is stable, ``retriable`` is False
    (the same bytes will not decode later)."""

    code = "format_error"
    retriable = False


class MessageIdError(FormatError):
    """A message id (base64, string form or fields) is malformed or out of range."""

    code = "invalid_message_id"


class InvalidMessage(FormatError):
    """A message to publish has a field outside the entry format's bounds."""

    code = "invalid_message"


class MessageTooLarge(InvalidMessage):
    """One message does not fit in an entry even on its own."""

    code = "message_too_large"


class CorruptEntry(FormatError):
    """A ledger entry's payload is not a valid batch (docs/decisions/0004)."""

    code = "corrupt_entry"
