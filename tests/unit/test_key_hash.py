"""Key_Shared hash: the test vectors of docs/compatibility.md §4.5 and the sticky-key rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.formats.key_hash import (
    HASH_MASK,
    HASH_RANGE_SIZE,
    NONE_KEY,
    RING_REPLICA_POINTS,
    RING_REPLICA_POINTS_MAX,
    key_hash,
    key_slot,
    murmur3_32,
    ring_point_hash,
    ring_points,
    sticky_key,
    sticky_slot,
)

pytestmark = pytest.mark.unit

VECTORS = [
    (b"Order-3459134", 3112179635, 964695987, 6067),
    (b"NONE_KEY", 2652225187, 504741539, 48803),
    (b"key-1", 2561742240, 414258592, 5536),
]


@pytest.mark.parametrize(("key", "raw", "masked", "slot"), VECTORS)
def test_reference_vectors(key: bytes, raw: int, masked: int, slot: int) -> None:
    assert murmur3_32(key) == raw
    assert key_hash(key) == masked
    assert key_slot(key) == slot


def test_known_murmur3_values() -> None:
    # Murmur3 x86_32 seed 0 reference values (SMHasher): empty input and "hello"
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"hello") == 0x248BFA47


def test_sticky_key_prefers_ordering_key_then_partition_key_then_none_key() -> None:
    assert sticky_key(b"ord", b"part") == b"ord"
    assert sticky_key(None, b"part") == b"part"
    assert sticky_key(None, None) == NONE_KEY == b"NONE_KEY"
    assert sticky_key(b"", b"part") == b""  # present but empty still wins (protobuf has_*)
    assert sticky_key(None, b"") == b""


def test_sticky_slot_of_keyless_message_is_none_key_slot() -> None:
    assert sticky_slot(None, None) == 48803
    assert sticky_slot(b"key-1", b"Order-3459134") == 5536
    assert sticky_slot(None, b"Order-3459134") == 6067


def test_ring_points_use_name_nul_index() -> None:
    assert ring_point_hash("c1", 7) == key_hash(b"c1\x007")
    points = list(ring_points("consumer-a"))
    assert len(points) == RING_REPLICA_POINTS
    assert points[0] == ring_point_hash("consumer-a", 0)
    assert len(set(points)) == len(points)
    assert list(ring_points("consumer-a", 3)) == points[:3]


def test_ring_points_bound() -> None:
    assert len(list(ring_points("x", RING_REPLICA_POINTS_MAX))) == RING_REPLICA_POINTS_MAX
    with pytest.raises(AssertionError):
        list(ring_points("x", RING_REPLICA_POINTS_MAX + 1))
    with pytest.raises(AssertionError):
        list(ring_points("x", 0))


@given(st.binary(max_size=64))
def test_hash_and_slot_ranges(key: bytes) -> None:
    assert 0 <= key_hash(key) <= HASH_MASK
    assert key_hash(key) == murmur3_32(key) & HASH_MASK
    assert 0 <= key_slot(key) < HASH_RANGE_SIZE
    assert key_slot(key) == key_hash(key) % HASH_RANGE_SIZE
