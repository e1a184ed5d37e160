"""Election decisions (coordination/election_core.py) and the prefix view they rely on."""

from __future__ import annotations

import pytest

from coordination import election_core as core
from coordination.election_core import Blocked, Candidate, Create, Lead, WaitFor
from coordination.prefix_view import Entry, PrefixView
from coordination.store import EventKind, KeyValue, WatchEvent

pytestmark = pytest.mark.unit

PREFIX = "/folio/elections/auditor/"


def kv(cid: str, create: int, lease: int = 7, mod: int | None = None) -> KeyValue:
    return KeyValue(PREFIX + cid, cid.encode(), create, mod or create, 1, lease)


def test_the_oldest_key_leads_regardless_of_id_order() -> None:
    cands = core.candidates_from_listing(PREFIX, [kv("a", 30), kv("b", 10), kv("c", 20)])
    assert core.leader_id(cands) == "b"
    assert core.leader_id([]) is None
    assert core.leader_id([Candidate("y", 5), Candidate("x", 5)]) == "x"  # tie: id decides


def test_keys_outside_or_below_the_election_are_not_candidates() -> None:
    listing = [
        kv("a", 3),
        KeyValue(PREFIX + "a/sub", b"", 1, 1, 1, 0),
        KeyValue("/folio/elections/other/z", b"", 1, 1, 1, 0),
    ]
    assert core.candidates_from_listing(PREFIX, listing) == [Candidate("a", 3, 7)]


def test_each_waiter_watches_only_its_predecessor() -> None:
    cands = core.candidates_from_listing(PREFIX, [kv("a", 10), kv("b", 20), kv("c", 30)])
    assert core.predecessor(cands, "a") is None
    assert core.predecessor(cands, "b") == Candidate("a", 10, 7)
    assert core.predecessor(cands, "c") == Candidate("b", 20, 7)
    assert core.predecessor(cands, "zz") is None


def test_campaign_steps() -> None:
    cands = core.candidates_from_listing(PREFIX, [kv("a", 10, lease=1), kv("b", 20, lease=2)])
    assert core.campaign_step(cands, "c", 3) == Create()
    assert core.campaign_step(cands, "a", 1) == Lead()
    assert core.campaign_step(cands, "b", 2) == WaitFor("a")
    assert core.campaign_step(cands, "b", 99) == Blocked(lease=2)  # my id, someone else's lease
    assert core.campaign_step([], "solo", 1) == Create()


def test_leader_changes_as_the_view_applies_events() -> None:
    view = PrefixView(PREFIX, [kv("a", 10), kv("b", 20)], revision=20)
    leader = core.leader_id(core.candidates_from_entries(PREFIX, view.entries))
    assert leader == "a"
    assert view.apply(WatchEvent(EventKind.PUT, PREFIX + "c", b"c", 21))
    assert view.entries[PREFIX + "c"].create_revision == 21
    assert view.apply(WatchEvent(EventKind.DELETE, PREFIX + "a", b"", 22))
    assert core.leader_id(core.candidates_from_entries(PREFIX, view.entries)) == "b"
    # an update keeps the creation revision, so it does not reorder candidates
    assert view.apply(WatchEvent(EventKind.PUT, PREFIX + "b", b"b2", 23))
    assert view.entries[PREFIX + "b"] == Entry(b"b2", 20, 23)


def test_prefix_view_ignores_replayed_and_stale_events() -> None:
    view = PrefixView(PREFIX, [kv("a", 10, mod=15)], revision=15)
    assert not view.apply(WatchEvent(EventKind.PUT, PREFIX + "a", b"old", 12))  # before the listing
    assert not view.apply(WatchEvent(EventKind.DELETE, PREFIX + "a", b"", 15))
    assert not view.apply(WatchEvent(EventKind.PUT, "/elsewhere", b"", 16))
    assert view.apply(WatchEvent(EventKind.DELETE, PREFIX + "a", b"", 16))
    assert not view.apply(WatchEvent(EventKind.PUT, PREFIX + "a", b"old", 15))  # replay after delete
    assert not view.apply(WatchEvent(EventKind.DELETE, PREFIX + "a", b"", 17))  # already gone
    assert view.apply(WatchEvent(EventKind.PUT, PREFIX + "a", b"new", 18))
    assert view.entries == {PREFIX + "a": Entry(b"new", 18, 18)}
    assert view.revision == 18


def test_candidate_ids_are_validated() -> None:
    core.validate_candidate_id("gateway-1:8080")
    for bad in ["", "a/b", "tab\there"]:
        with pytest.raises(ValueError):
            core.validate_candidate_id(bad)
