"""Typed errors of the coordination package.

Owns: the CoordinationError tree. Every error carries a stable ``code`` and a
``retriable`` flag; the gateway maps codes to HTTP/WS statuses in one place.
"""

from __future__ import annotations


class CoordinationError(Exception):
    code = "coordination_error"
    retriable = False


class Unavailable(CoordinationError):
    """The metadata store cannot be reached (etcd down, timeout)."""

    code = "metadata_unavailable"
    retriable = True


class LeaseLost(CoordinationError):
    """A lease expired or was revoked; whatever was held under it is gone."""

    code = "lease_lost"


class CompareFailed(CoordinationError):
    """A compare-and-swap lost a race more times than the retry budget allows."""

    code = "compare_failed"
    retriable = True


class NotFound(CoordinationError):
    code = "not_found"


class Compacted(CoordinationError):
    """A watch asked for history older than the store keeps (etcd compaction,
    or the in-memory store's bounded event history). Re-list, then watch from
    the listing's revision + 1."""

    code = "compacted"

    def __init__(self, compacted_revision: int, message: str = "") -> None:
        self.compacted_revision = compacted_revision
        super().__init__(message or f"revisions up to {compacted_revision} were compacted")


class WatchOverflow(CoordinationError):
    """A watcher fell further behind than its bounded queue allows; the watch
    ended. Every event before ``resume_revision`` was delivered in order; watch
    again from ``resume_revision`` (events of that exact revision that were
    already delivered may come again) or re-list."""

    code = "watch_overflow"
    retriable = True

    def __init__(self, resume_revision: int, bound: int) -> None:
        self.resume_revision = resume_revision
        self.bound = bound
        super().__init__(f"watch queue overflowed ({bound} events); resume from revision {resume_revision}")


class AlreadyExists(CoordinationError):
    """A key that must be created fresh is held by someone else (e.g. a member
    id registered under another live lease)."""

    code = "already_exists"
