"""Typed errors of the broker shells (topics, subscriptions, producers).

Owns: the errors a client can cause or meet on the messaging path. Rule
(docs/architecture.md §11): stable ``code`` strings; ``gateway/api/errors.py`` maps them to
HTTP status and WebSocket close codes in one table.
"""

from __future__ import annotations

from gateway.errors import GatewayError


class ProducerBusy(GatewayError, code="producer_busy"):
    """A producer with this name is already connected to the topic (409)."""


class ConsumerBusy(GatewayError, code="consumer_busy"):
    """Exclusive subscription taken, or consumer limit reached (409)."""


class SubscriptionTypeMismatch(GatewayError, code="subscription_type_mismatch"):
    """The subscription has consumers of another type (409)."""


class SubscriptionNotFound(GatewayError, code="not_found"):
    """The topic has no subscription of that name."""


class NotAllowed(GatewayError, code="not_allowed"):
    """The operation does not apply (e.g. cumulative ack on Shared) (400/405)."""


class TooManyRequests(GatewayError, code="too_many_requests", retriable=True):
    """A bounded queue is full; retry later (429)."""


class TopicUnavailable(GatewayError, code="topic_unavailable", retriable=True):
    """The topic is closing or moved to another gateway; reconnect (503)."""


class OwnershipMovedWhileLoading(TopicUnavailable):
    """The topic's bundle left this gateway while the topic loaded (or before the load
    began); the load was discarded and a fresh lookup finds the owner. A REST request
    looks it up again a few times; after that it is answered 503 with ``Retry-After``."""

    retry_after_s = 1


class DuplicateUndetermined(GatewayError, code="duplicate_undetermined", retriable=True):
    """Dedup: an earlier send with this sequence id is still in flight (retry)."""


class SequenceGap(GatewayError, code="sequence_gap", retriable=True):
    """Dedup: an earlier sequence id of this producer failed; send it again first."""


class SequenceAbandoned(GatewayError, code="sequence_abandoned"):
    """Dedup: this sequence id failed and later ids were stored after it; it is
    not stored now (it would be out of order) - send it under a new id."""


class BacklogQuotaExceeded(GatewayError, code="backlog_quota_exceeded", retriable=True):
    """A publish is refused: the topic's backlog is above its quota; retry once consumers catch up."""


class TopicTerminated(GatewayError, code="topic_terminated"):
    """The topic was terminated (sealed): it takes no more messages or producers."""


class SubscriptionExists(GatewayError, code="already_exists"):
    """A subscription of that name exists already on the topic."""


class SubscriptionBusy(GatewayError, code="precondition_failed"):
    """Admin: the subscription or topic has connected clients (412 unless forced)."""
