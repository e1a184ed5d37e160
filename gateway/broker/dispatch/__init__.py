"""Subscription dispatchers: which consumer gets which message (pure).

Public names only; see ``base`` for the interface and the shell contract.
"""

from typing import TYPE_CHECKING

from gateway.broker.dispatch.base import (
    HASH_SLOTS,
    ActiveChanged,
    ConsumerId,
    ConsumerInfo,
    ConsumerStats,
    DeadLetter,
    Deliver,
    Dispatcher,
    DispatcherConfig,
    DispatcherStats,
    Effect,
    HashRange,
    KeySharedMode,
    Message,
    RangesChanged,
    Reject,
    RejectReason,
    RewindTo,
)
from gateway.broker.dispatch.key_shared import KeySharedDispatcher
from gateway.broker.dispatch.shared import SharedDispatcher
from gateway.broker.dispatch.single_active import ExclusiveDispatcher, FailoverDispatcher

if TYPE_CHECKING:  # mypy: every dispatcher satisfies the protocol
    _ALL: tuple[type[Dispatcher], ...] = (
        ExclusiveDispatcher,
        FailoverDispatcher,
        SharedDispatcher,
        KeySharedDispatcher,
    )

__all__ = [
    "HASH_SLOTS",
    "ActiveChanged",
    "ConsumerId",
    "ConsumerInfo",
    "ConsumerStats",
    "DeadLetter",
    "Deliver",
    "Dispatcher",
    "DispatcherConfig",
    "DispatcherStats",
    "Effect",
    "ExclusiveDispatcher",
    "FailoverDispatcher",
    "HashRange",
    "KeySharedDispatcher",
    "KeySharedMode",
    "Message",
    "RangesChanged",
    "Reject",
    "RejectReason",
    "RewindTo",
    "SharedDispatcher",
]
