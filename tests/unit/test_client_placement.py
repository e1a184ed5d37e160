"""Placement: most free space, least load, seeded ties, replacements."""

from __future__ import annotations

import random

import pytest

from storage.client import placement
from storage.errors import NotEnoughNodes
from storage.types import NodeInfo

pytestmark = pytest.mark.unit

GIB = 1 << 30


def node(name: str, free_gib: int = 10, load: float = 0.0, read_only: bool = False) -> NodeInfo:
    return NodeInfo(name, name, "", free_gib * GIB, 100 * GIB, load, read_only)


def test_prefers_most_free_space_then_least_load() -> None:
    nodes = [node("a", 5), node("b", 50), node("c", 20, load=900), node("d", 20, load=10), node("e", 1)]
    assert placement.choose_ensemble(nodes, 3, random.Random(1)) == ("b", "d", "c")


def test_read_only_and_excluded_nodes_are_never_chosen() -> None:
    nodes = [node("a", 90, read_only=True), node("b"), node("c"), node("d")]
    for seed in range(20):
        chosen = placement.choose_ensemble(nodes, 2, random.Random(seed), exclude={"c"})
        assert set(chosen) == {"b", "d"}


def test_ties_are_broken_by_the_seed_and_spread_load() -> None:
    nodes = [node(n) for n in "abcdef"]
    first = placement.choose_ensemble(nodes, 3, random.Random(7))
    assert placement.choose_ensemble(list(reversed(nodes)), 3, random.Random(7)) == first  # order-independent
    seen = {placement.choose_ensemble(nodes, 3, random.Random(seed)) for seed in range(50)}
    assert len(seen) > 5


def test_small_differences_fall_in_the_same_bucket() -> None:
    a = NodeInfo("a", "a", "", 10 * GIB + 5, 100 * GIB, 3.0, False)
    b = NodeInfo("b", "b", "", 10 * GIB + 900, 100 * GIB, 7.0, False)
    picks = {placement.choose_ensemble([a, b], 1, random.Random(s))[0] for s in range(30)}
    assert picks == {"a", "b"}


def test_not_enough_nodes() -> None:
    with pytest.raises(NotEnoughNodes):
        placement.choose_ensemble([node("a"), node("b", read_only=True)], 2, random.Random(0))


def test_replacement_excludes_members_and_failed_nodes() -> None:
    nodes = [node(n) for n in "abcdef"] + [node("z", 99)]
    repl = placement.choose_replacement(nodes, ("a", "b", "c"), {"z", "b"}, random.Random(3))
    assert repl in {"d", "e", "f"}
    ens, readmitted = placement.heal_members(nodes, ("a", "b", "c"), {"b"}, random.Random(0), readmit={"b"})
    assert ens == ("a", "z", "c") and not readmitted  # most free space wins; another node before b itself


def test_no_replacement_leaves_the_member_failed_unless_it_answers_again() -> None:
    nodes = [node(n) for n in "abc"]
    with pytest.raises(NotEnoughNodes):
        placement.choose_replacement(nodes, ("a", "b", "c"), {"b"}, random.Random(0))
    unchanged = placement.heal_members(nodes, ("a", "b", "c"), {"b"}, random.Random(0))
    assert unchanged == (("a", "b", "c"), frozenset())
    healed = placement.heal_members(nodes, ("a", "b", "c"), {"b", "c"}, random.Random(0), readmit={"c"})
    assert healed == (("a", "b", "c"), frozenset({"c"}))  # c takes its slot back, b stays failed
    four = [*nodes, node("d")]  # one outside node: the first failed slot gets it, c its own slot
    healed = placement.heal_members(four, ("a", "b", "c"), {"b", "c"}, random.Random(0), readmit={"c"})
    assert healed == (("a", "d", "c"), frozenset({"c"}))
    excluded = placement.heal_members(four, ("a", "b", "c"), {"b"}, random.Random(0), exclude={"d"})
    assert excluded == (("a", "b", "c"), frozenset())  # d is backing off
