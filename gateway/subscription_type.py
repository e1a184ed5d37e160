"""The four subscription types: one closed set, written once for every layer of the gateway.

Owns: the names a client gives ``subscriptionType`` (Pulsar's spelling, matched
case-sensitively) and what follows from the type alone. Rules: Exclusive and
Failover have one active consumer that receives the log in order and may ack
cumulatively; Shared and Key_Shared spread messages over their consumers
(docs/subscriptions.md). The query parsers, the webhook settings, the admin
models and the broker's dispatchers all take this enum; a stored subscription's
type is read back with ``stored``.
"""

from __future__ import annotations

import enum


class SubscriptionType(enum.StrEnum):
    EXCLUSIVE = "Exclusive"  # first: a WebSocket consumer's default, as Pulsar's
    SHARED = "Shared"
    FAILOVER = "Failover"
    KEY_SHARED = "Key_Shared"

    @property
    def single_active(self) -> bool:
        """One consumer receives everything, in log order (cumulative acks allowed)."""
        return self is SubscriptionType.EXCLUSIVE or self is SubscriptionType.FAILOVER

    @classmethod
    def stored(cls, text: object) -> SubscriptionType | None:
        """The type a stored subscription record names; None when it names none we know."""
        return cls._value2member_map_.get(text) if isinstance(text, str) else None  # type: ignore[return-value]
