"""The decoded ownership caches (gateway/ownership/ownership_view.py)."""

from __future__ import annotations

import pytest

from coordination.prefix_view import Entry
from gateway.names import NamespaceName
from gateway.ownership.bundles import NamespaceBundle, bundle_ranges
from gateway.ownership.key_records import (
    Assignment,
    UnloadRequest,
    assignment_key,
    owner_key,
    unload_key,
)
from gateway.ownership.ownership_view import OwnershipView

pytestmark = pytest.mark.unit

NS = NamespaceName("public", "default")
B = [NamespaceBundle(NS, r) for r in bundle_ranges(4)]


def entry(value: bytes, revision: int) -> Entry:
    return Entry(value, revision, revision)


def test_owner_updates_by_key_and_by_relisting() -> None:
    view = OwnershipView()
    entries = {
        owner_key(B[0]): entry(b"gw-a", 5),
        owner_key(B[1]): entry(b"gw-b", 6),
        "/folio/bundles/x": entry(b"", 1),
    }
    assert sorted(view.update_owners(entries, None)) == [B[0], B[1]]
    assert view.bundle_owners() == {B[0]: "gw-a", B[1]: "gw-b"}
    assert view.owner_of_hash(NS, B[1].range.lo + 7) == (B[1], "gw-b")
    assert view.owner_of_hash(NS, B[2].range.lo) is None
    assert view.owner_of_hash(NamespaceName("public", "other"), 0) is None
    del entries[owner_key(B[0])]
    assert view.update_owners(entries, owner_key(B[0])) == [B[0]]
    assert view.owner(B[0]) is None and view.owner(B[1]) == "gw-b"
    assert view.update_owners({}, None) == [] and view.bundle_owners() == {}


def test_assignments_unloads_and_counts() -> None:
    view = OwnershipView()
    view.update_owners({owner_key(B[0]): entry(b"gw-a", 5)}, None)
    assigned = {
        assignment_key(B[0]): entry(Assignment("gw-b", 1).encode(), 7),  # a move in progress
        assignment_key(B[2]): entry(Assignment("gw-b", 1).encode(), 8),
        assignment_key(B[3]): entry(b"garbage", 9),
    }
    assert sorted(view.update_assignments(assigned, None)) == [B[0], B[2]]
    assert view.assigned_to(B[2]) == "gw-b" and view.assigned_to(B[3]) is None
    # B[0] counts for its holder; B[2] (unowned) for its assignee; B[1] is ours though the cache lags
    assert view.counts([B[1]], "gw-c") == {"gw-a": 1, "gw-b": 1, "gw-c": 1}
    request = UnloadRequest("gw-a", 5, "gw-b", 1)
    assert view.update_unloads({unload_key(B[0]): entry(request.encode(), 10)}, None) == [B[0]]
    assert view.unloads[B[0]] == (request, 10)
    assert view.update_unloads({}, unload_key(B[0])) == [] and view.unloads == {}
