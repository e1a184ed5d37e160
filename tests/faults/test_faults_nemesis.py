"""The nemesis's schedule and the links each partition kind cuts (folio/faults/nemesis.py),
without processes: a CI-sized schedule holds every kind twice, and each kind cuts
the links its name says, one way or both."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace
from typing import Any, cast

import pytest

from folio.faults.nemesis import GRAY_KINDS, PARTITION_KINDS, FaultKind, Nemesis, schedule

pytestmark = pytest.mark.unit


def test_the_ci_run_holds_every_kind_at_least_twice() -> None:
    kinds = Counter(fault.kind for fault in schedule(17, 2 * len(FaultKind), (1.5, 3.0), hold_scale=0.5))
    assert set(kinds) == set(FaultKind) and min(kinds.values()) >= 2, kinds
    assert set(kinds) >= PARTITION_KINDS | GRAY_KINDS


def links(kind: FaultKind, owner: int = 1) -> list[tuple[str, str]]:
    network = SimpleNamespace(etcd_members=["etcd0", "etcd1", "etcd2"])
    cluster = SimpleNamespace(nodes=[None] * 3, gateways=[None] * 2, network=network)
    nemesis = Nemesis(cast(Any, cluster), cast(Any, None), [], 3.0)
    cut, _targets = nemesis._links(kind, random.Random(4), owner)
    return cut


def test_each_partition_kind_cuts_the_links_it_names() -> None:
    assert len(links(FaultKind.CUT_GATEWAY_NODE)) == 2
    two = links(FaultKind.CUT_GATEWAY_TWO_NODES)
    assert len(two) == 4 and all("gateway1" in link for link in two)
    assert {b for a, b in links(FaultKind.CUT_GATEWAY_ALL_NODES) if a == "gateway1"} == {
        "node0",
        "node1",
        "node2",
    }
    assert sorted(links(FaultKind.CUT_GATEWAY_ETCD)) == [("etcd", "gateway1"), ("gateway1", "etcd")]
    node_etcd = links(FaultKind.CUT_NODE_ETCD)
    assert len(node_etcd) == 2 and all(
        ("etcd" in link) and not any("gateway" in x for x in link) for link in node_etcd
    )
    assert sorted(links(FaultKind.CUT_OWNER_PEERS)) == [("gateway0", "gateway1"), ("gateway1", "gateway0")]
    assert links(FaultKind.ONE_WAY_ETCD_TO_GATEWAY) == [("etcd", "gateway1")]
    [(src, dst)] = links(FaultKind.ONE_WAY_GATEWAY_TO_NODE)
    assert src == "gateway1" and dst.startswith("node")
    assert links(FaultKind.BLOCK_GATEWAY_LOOP) == []
    split = links(FaultKind.ETCD_MINORITY_SPLIT)
    alone = set.intersection(*(set(link) for link in split))  # the member cut from both others
    assert len(split) == 4 and len(alone) == 1 and all(m.startswith("etcd") for link in split for m in link)
