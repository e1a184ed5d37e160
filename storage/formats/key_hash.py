"""Key_Shared hashing: which 16-bit slot a message's sticky key falls in (pure).

Owns: the sticky-key rule (``sticky_key``, ``sticky_slot``; a message without
a key has ``NONE_SLOT``, hashed once), Pulsar's Murmur3 hash of a key
(``key_hash``, ``key_slot``) and the hash of a consistent-hashing ring point
(``ring_point_hash``). Selectors (hash ranges, consistent ring, sticky ranges)
live in the Key_Shared dispatcher and use only these functions, so every
gateway maps a key to the same slot as a Pulsar broker would; the Spark
statistics use the same functions to predict what each Key_Shared consumer
would receive.

Rule: docs/compatibility.md §4.5. Sticky key = the ordering key if the
message has one, else its partition key, else the literal bytes ``NONE_KEY``.
Hash = Murmur3 x86 32-bit, seed 0 (the ``mmh3`` package), masked with
``0x7FFFFFFF``; the slot is that hash modulo ``HASH_RANGE_SIZE`` (65536).
With batching, Pulsar routes a whole entry by one key; our entries carry
every message's own keys (docs/decisions/0004), so the dispatcher may route by
the first message's key (Pulsar's behaviour) or per message.
"""

from __future__ import annotations

from collections.abc import Iterator

import mmh3

HASH_RANGE_SIZE = 65536  # slots 0..65535; Key_Shared ranges are inclusive [start, end] in it
HASH_MASK = 0x7FFFFFFF
NONE_KEY = b"NONE_KEY"
RING_REPLICA_POINTS = 100  # subscriptionKeySharedConsistentHashingReplicaPoints default
RING_REPLICA_POINTS_MAX = 10_000  # bound on points per consumer a caller may ask for


def murmur3_32(data: bytes) -> int:
    """Unsigned Murmur3 x86 32-bit of ``data``, seed 0."""
    return int(mmh3.hash(data, 0, signed=False))


def key_hash(key: bytes) -> int:
    """Pulsar's sticky-key hash: Murmur3-32 with the top bit masked (0..2^31-1)."""
    return murmur3_32(key) & HASH_MASK


def key_slot(key: bytes) -> int:
    """The slot of ``key`` in the Key_Shared hash range (0..65535)."""
    return key_hash(key) % HASH_RANGE_SIZE


def sticky_key(ordering_key: bytes | None, partition_key: bytes | None) -> bytes:
    """The key Key_Shared routes a message by: ordering key, else partition key,
    else ``NONE_KEY`` (Pulsar's ``Commands.peekStickyKey``). Presence is what
    counts, as protobuf's ``has_*``: an empty key that is set is used as is.
    ``partition_key`` is the raw key bytes (a base64-flagged Pulsar key is
    decoded before it is stored; a WebSocket/REST string key is its UTF-8)."""
    if ordering_key is not None:
        return ordering_key
    if partition_key is not None:
        return partition_key
    return NONE_KEY


NONE_SLOT = key_slot(NONE_KEY)  # the slot of every message without a key


def sticky_slot(ordering_key: bytes | None, partition_key: bytes | None) -> int:
    """``key_slot(sticky_key(...))``: the slot a message is routed by (a message
    without either key, the usual one, is not hashed: ``NONE_SLOT``)."""
    if ordering_key is None and partition_key is None:
        return NONE_SLOT
    return key_slot(sticky_key(ordering_key, partition_key))


def ring_point_hash(consumer_name: str, index: int) -> int:
    """Hash of the ``index``-th ring point of a consumer in the consistent-hashing
    selector: Murmur3 of ``consumerName + NUL + index`` (current Pulsar form),
    masked like a key hash so points and keys share one space."""
    return key_hash(f"{consumer_name}\0{index}".encode())


def ring_points(consumer_name: str, replicas: int = RING_REPLICA_POINTS) -> Iterator[int]:
    """The ``replicas`` ring point hashes of one consumer, in index order."""
    assert 1 <= replicas <= RING_REPLICA_POINTS_MAX, replicas
    for index in range(replicas):
        yield ring_point_hash(consumer_name, index)
