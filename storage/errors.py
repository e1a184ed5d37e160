"""Typed errors of the storage package, one per wire status.

Owns: ``StorageError`` and the mapping between wire status codes and error
classes. Each error has a stable ``code`` and ``retriable``.
"""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """Response status on the node wire protocol (docs/decisions/0001)."""

    OK = 0
    NO_SUCH_LEDGER = 1
    NO_SUCH_ENTRY = 2
    FENCED = 3
    READ_ONLY = 4
    BAD_REQUEST = 5
    UNKNOWN_OP = 6
    TOO_LARGE = 7
    UNAVAILABLE = 8
    TIMEOUT = 9  # long-poll expired without change (not an error for read-LAC)


class StorageError(Exception):
    code = "storage_error"
    retriable = False
    status = Status.UNAVAILABLE


class NoSuchLedger(StorageError):
    code = "no_such_ledger"
    status = Status.NO_SUCH_LEDGER


class NoSuchEntry(StorageError):
    code = "no_such_entry"
    status = Status.NO_SUCH_ENTRY


class Fenced(StorageError):
    """The ledger was fenced by a recovering client: this writer is done."""

    code = "ledger_fenced"
    status = Status.FENCED


class ReadOnly(StorageError):
    code = "node_read_only"
    status = Status.READ_ONLY
    retriable = True


class BadRequest(StorageError):
    code = "bad_request"
    status = Status.BAD_REQUEST


class ProtocolViolation(BadRequest):
    """A malformed frame from the peer; the connection is closed."""

    code = "protocol_violation"


class ChecksumMismatch(BadRequest):
    code = "checksum_mismatch"


class UnknownOp(StorageError):
    code = "unknown_op"
    status = Status.UNKNOWN_OP


class TooLarge(StorageError):
    code = "too_large"
    status = Status.TOO_LARGE


class NodeUnavailable(StorageError):
    """A node cannot be reached or closed the connection."""

    code = "node_unavailable"
    status = Status.UNAVAILABLE
    retriable = True


class QuorumLost(StorageError):
    """Not enough writable nodes remain to form the write/ack quorum."""

    code = "quorum_lost"
    retriable = True


class LedgerClosed(StorageError):
    code = "ledger_closed"


class NotEnoughNodes(StorageError):
    code = "not_enough_nodes"
    retriable = True


class MetadataConflict(StorageError):
    code = "metadata_conflict"


_BY_STATUS: dict[Status, type[StorageError]] = {
    Status.NO_SUCH_LEDGER: NoSuchLedger,
    Status.NO_SUCH_ENTRY: NoSuchEntry,
    Status.FENCED: Fenced,
    Status.READ_ONLY: ReadOnly,
    Status.BAD_REQUEST: BadRequest,
    Status.UNKNOWN_OP: UnknownOp,
    Status.TOO_LARGE: TooLarge,
    Status.UNAVAILABLE: NodeUnavailable,
}


def error_for_status(status: int, message: str = "") -> StorageError:
    try:
        cls = _BY_STATUS[Status(status)]
    except (ValueError, KeyError):
        cls = StorageError
    return cls(message or cls.code)
