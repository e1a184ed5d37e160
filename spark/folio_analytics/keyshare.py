"""What each Key_Shared consumer would receive, and when keys are skewed (pure).

Owns: ``predict`` - the share of a topic's messages that falls in each
consumer's hash ranges - and ``skew_warnings``. Rule: a key's slot is
``storage.formats.key_hash.key_slot`` (Murmur3-32 masked, mod 65536), the one
the gateways' Key_Shared dispatcher routes by. The heavy keys are placed in
their exact slot; every other message is spread evenly over its bucket of
``SLOTS_PER_BUCKET`` slots (their keys hash uniformly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from folio_analytics.profile import SLOT_BUCKETS, SLOTS_PER_BUCKET, Profile, key_bytes
from storage.formats.key_hash import key_slot

Range = tuple[int, int]  # inclusive [start, end] slots

HOT_KEY_SHARE = 0.10  # a key with at least this share of the messages ...
HOT_KEY_FACTOR = 3.0  # ... and this many times the mean key's share is a hot key
UNFAIR_FACTOR = 1.5  # a consumer predicted this many times its fair share is overloaded


@dataclass(frozen=True, slots=True)
class Share:
    consumer: str
    messages: float
    share: float  # of the messages routed by key (0..1)


def _overlap(bucket: int, start: int, end: int) -> int:
    low = bucket * SLOTS_PER_BUCKET
    high = low + SLOTS_PER_BUCKET - 1
    return max(0, min(high, end) - max(low, start) + 1)


def predict(profile: Profile, consumers: Sequence[tuple[str, Sequence[Range]]], top: int = 64) -> list[Share]:
    """Messages each consumer's ranges would have received of the whole history."""
    rest = list(profile.slot_buckets)
    exact: list[tuple[int, int]] = []  # (slot, messages) of the heavy keys
    for key, count in profile.heavy.top(top):
        slot = key_slot(key_bytes(key))
        bucket = slot // SLOTS_PER_BUCKET
        placed = min(count, rest[bucket])
        rest[bucket] -= placed
        exact.append((slot, placed))
    total = sum(profile.slot_buckets)
    shares = []
    for name, ranges in consumers:
        got = 0.0
        for start, end in ranges:
            for bucket in range(
                start // SLOTS_PER_BUCKET, min(end // SLOTS_PER_BUCKET, SLOT_BUCKETS - 1) + 1
            ):
                got += rest[bucket] * _overlap(bucket, start, end) / SLOTS_PER_BUCKET
            got += sum(n for slot, n in exact if start <= slot <= end)
        shares.append(Share(name, got, got / total if total else 0.0))
    return shares


def skew_warnings(profile: Profile, shares: Sequence[Share], distinct: int) -> list[str]:
    """Plain-language warnings: hot keys, and consumers predicted far above a fair share."""
    warnings = []
    if profile.messages:
        mean = 1.0 / max(distinct, 1)
        for key, count in profile.heavy.top(5):
            share = count / profile.messages
            if share >= HOT_KEY_SHARE and share >= HOT_KEY_FACTOR * mean:
                warnings.append(f"hot key {key!r}: {share:.0%} of the messages")
    if len(shares) > 1:
        fair = 1.0 / len(shares)
        for s in shares:
            if s.share >= UNFAIR_FACTOR * fair:
                warnings.append(
                    f"Key_Shared consumer {s.consumer} would receive {s.share:.0%} of the keyed messages "
                    f"(fair share {fair:.0%})"
                )
    return warnings
