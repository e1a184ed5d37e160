"""Typed errors of the broker shells (topics, subscriptions, producers).

Owns: the errors a client can cause or meet on the messaging path. Rule
(docs/architecture.md §11): stable ``code`` strings; ``gateway/api/errors.py`` maps them to
HTTP status and WebSocket close codes in one table.
"""

from __future__ import annotations

from gateway.errors import GatewayError


class ProducerBusy(GatewayError):
    """A producer with this name is already connected to the topic (409)."""

    code = "producer_busy"


class ConsumerBusy(GatewayError):
    """Exclusive subscription taken, or consumer limit reached (409)."""

    code = "consumer_busy"


class SubscriptionTypeMismatch(GatewayError):
    """The subscription has consumers of another type (409)."""

    code = "subscription_type_mismatch"


class SubscriptionNotFound(GatewayError):
    code = "not_found"


class NotAllowed(GatewayError):
    """The operation does not apply (e.g. cumulative ack on Shared) (400/405)."""

    code = "not_allowed"


class TooManyRequests(GatewayError):
    """A bounded queue is full; retry later (429)."""

    code = "too_many_requests"
    retriable = True


class TopicUnavailable(GatewayError):
    """The topic is closing or moved to another gateway; reconnect (503)."""

    code = "topic_unavailable"
    retriable = True


class OwnershipMovedWhileLoading(TopicUnavailable):
    """The topic's bundle left this gateway while the topic loaded (or before the load
    began); the load was discarded and a fresh lookup finds the owner. A REST request
    looks it up again a few times; after that it is answered 503 with ``Retry-After``."""

    retry_after_s = 1


class DuplicateUndetermined(GatewayError):
    """Dedup: an earlier send with this sequence id is still in flight (retry)."""

    code = "duplicate_undetermined"
    retriable = True


class SequenceGap(GatewayError):
    """Dedup: an earlier sequence id of this producer failed; send it again first."""

    code = "sequence_gap"
    retriable = True


class SequenceAbandoned(GatewayError):
    """Dedup: this sequence id failed and later ids were stored after it; it is
    not stored now (it would be out of order) - send it under a new id."""

    code = "sequence_abandoned"


class BacklogQuotaExceeded(GatewayError):
    code = "backlog_quota_exceeded"
    retriable = True


class TopicTerminated(GatewayError):
    """The topic was terminated (sealed): it takes no more messages or producers."""

    code = "topic_terminated"


class SubscriptionExists(GatewayError):
    code = "already_exists"


class SubscriptionBusy(GatewayError):
    """Admin: the subscription or topic has connected clients (412 unless forced)."""

    code = "precondition_failed"
