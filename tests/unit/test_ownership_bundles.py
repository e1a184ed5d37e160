"""Namespace bundles and the topic -> bundle hash (gateway/ownership/bundles.py, key_records.py)."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.names import InvalidName, NamespaceName, TopicName
from gateway.ownership.bundles import (
    HASH_MAX,
    BundleRange,
    NamespaceBundle,
    boundaries,
    bundle_for,
    bundle_for_hash,
    bundle_in,
    bundle_ranges,
    topic_hash,
)
from gateway.ownership.key_records import (
    Assignment,
    GatewayInfo,
    LoadReport,
    UnloadRequest,
    bundle_of_key,
    owner_key,
)

pytestmark = pytest.mark.unit


def test_boundaries_follow_pulsar() -> None:
    assert boundaries(4) == [0, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
    assert boundaries(1) == [0, 0xFFFFFFFF]
    edges = boundaries(3)
    assert edges[1] == 2**32 // 3 and edges[-1] == HASH_MAX and len(edges) == 4
    with pytest.raises(InvalidName):
        boundaries(0)
    with pytest.raises(InvalidName):
        boundaries(129)


def test_pulsar_test_vector() -> None:
    name = "persistent://public/default/my-topic"
    assert topic_hash(name) == 0x2BAD45F7 == zlib.crc32(name.encode())
    assert bundle_for(name, 4).name == "0x00000000_0x40000000"
    assert bundle_for(name, 1).name == "0x00000000_0xffffffff"


def test_each_partition_hashes_on_its_own() -> None:
    base = TopicName.parse("persistent://public/default/orders")
    hashes = {topic_hash(str(base.partition(i))) for i in range(8)}
    assert len(hashes) == 8
    assert bundle_for(str(base.partition(3)), 16) == bundle_for_hash(
        zlib.crc32(str(base.partition(3)).encode()), 16
    )


def test_range_name_round_trip_and_bad_names() -> None:
    r = BundleRange(0x40000000, 0x80000000)
    assert r.name == "0x40000000_0x80000000" and str(r) == r.name
    assert BundleRange.parse(r.name) == r
    for bad in ["", "0x1_0x2", "0x40000000-0x80000000", "0x80000000_0x40000000", "0xzz000000_0x40000000"]:
        with pytest.raises(InvalidName):
            BundleRange.parse(bad)


def test_ranges_are_half_open_except_the_last() -> None:
    first, *_, last = bundle_ranges(4)
    assert first.contains(0) and first.contains(0x3FFFFFFF) and not first.contains(0x40000000)
    assert last.contains(0xC0000000) and last.contains(HASH_MAX)
    assert bundle_for_hash(0x40000000, 4) == BundleRange(0x40000000, 0x80000000)
    assert bundle_for_hash(HASH_MAX, 4) == last
    assert bundle_for_hash(HASH_MAX, 3) == bundle_ranges(3)[-1]


@given(st.integers(min_value=0, max_value=HASH_MAX), st.integers(min_value=1, max_value=128))
def test_every_hash_is_in_exactly_one_bundle(h: int, n: int) -> None:
    ranges = bundle_ranges(n)
    holders = [r for r in ranges if r.contains(h)]
    assert holders == [bundle_for_hash(h, n)]


def test_namespace_bundle_paths_and_keys() -> None:
    topic = TopicName.parse("persistent://public/default/my-topic")
    nb = NamespaceBundle.of_topic(topic, 4)
    assert nb.path == "public/default/0x00000000_0x40000000"
    assert NamespaceBundle.parse_path(nb.path) == nb
    assert nb.contains(topic)
    assert not NamespaceBundle(NamespaceName("public", "other"), nb.range).contains(topic)
    key = owner_key(nb)
    assert key == "/folio/bundles/public/default/0x00000000_0x40000000"
    assert bundle_of_key("/folio/bundles/", key) == nb
    assert bundle_of_key("/folio/bundles/", "/folio/bundles/public/default/junk") is None
    assert bundle_of_key("/folio/bundles/", "/folio/other/public/default/0x00000000_0x40000000") is None


def test_records_round_trip_and_tolerate_garbage() -> None:
    info = GatewayInfo("gw-1", "http://127.0.0.1:8080", LoadReport(3, 4, 5.5, 0.25), 1234)
    assert GatewayInfo.decode(info.encode()) == info
    assert GatewayInfo.decode(b'{"id":"g","load":{"topics":2,"extra":1}}') == GatewayInfo(
        "g", "", LoadReport(2), 0
    )
    assert GatewayInfo.decode(b"not json") is None and GatewayInfo.decode(b'{"httpUrl":"x"}') is None
    assert Assignment.decode(Assignment("g", 7).encode()) == Assignment("g", 7)
    assert Assignment.decode(b"[]") is None
    request = UnloadRequest("a", 42, None, 9)
    assert UnloadRequest.decode(request.encode()) == request
    assert UnloadRequest.decode(b'{"from":"a"}') is None
    assert UnloadRequest.decode(b"[]") is None and Assignment.decode(b'{"gateway":"g","atMs":"x"}') is None


def test_explicit_boundaries_as_in_namespace_policies() -> None:
    name = "persistent://public/default/my-topic"
    assert bundle_for(name, boundaries(4)) == bundle_for(name, 4)
    split = [0, 0x20000000, 0x40000000, 0xFFFFFFFF]  # the first bundle was split in two
    assert bundle_for(name, split) == BundleRange(0x20000000, 0x40000000)
    assert bundle_in(0, split) == BundleRange(0, 0x20000000)
    assert bundle_in(HASH_MAX, split) == BundleRange(0x40000000, HASH_MAX)
    with pytest.raises(InvalidName):
        bundle_in(5, [0, 0x10])
