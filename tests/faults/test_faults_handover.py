"""Single faults whose unavailability is bounded by the lease TTL plus a few seconds
(folio/faults/handover.py): a gateway cut from a write quorum of storage nodes hands
its topics over (gateway/ownership/storage_reach.py), a gateway cut from a topic's
owner sends its clients elsewhere, an owner that loses etcd's answers gives way.

The owner of a topic is cut from two of the three storage nodes for far longer
than a lease; one REST producer publishes through each gateway. The gateway that
still reaches every node must serve the topic within the lease TTL plus a few
seconds (before, the cut owner kept the topic, unwritable, for the whole cut),
the lookup must name it while the cut lasts (no hand-back to the unhealthy
gateway), nothing acknowledged may be lost and no two gateways may acknowledge
for the topic at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from folio.faults.checkers import check
from folio.faults.handover import LEASE_TTL_S, cut_owner_from_nodes, cut_owner_from_peer

pytestmark = pytest.mark.component

HOLD_S = 25.0  # far past the bound: a gateway that keeps the topic fails
BOUND_S = LEASE_TTL_S + 9.0  # the lease TTL plus a few seconds (generous: a loaded box)


@pytest.mark.timeout(240)
async def test_a_gateway_cut_from_two_nodes_hands_its_topic_over(tmp_path: Path) -> None:
    outcome = await cut_owner_from_nodes(tmp_path, HOLD_S)
    result = check(outcome.ops)
    print(f"\n[owner cut from two nodes] {result.line()}")
    print(f"[owner cut from two nodes] back after (s): {outcome.back_after_s}")
    print(f"[owner cut from two nodes] longest without an ack (s): {outcome.longest_gap_s}")
    print(f"[owner cut from two nodes] owner {outcome.owner_at_cut} -> {outcome.owner_before_heal}")
    assert not result.lost and not result.dual_acks, result.details()
    for producer in ("via-owner", "via-other"):
        back = outcome.back_after_s.get(producer)
        assert back is not None and back < BOUND_S, (
            f"{producer}: publishing resumed {back} s into a {HOLD_S} s cut (bound {BOUND_S} s)"
        )
    assert outcome.owner_before_heal and outcome.owner_before_heal != outcome.owner_at_cut, (
        "the lookup still named the gateway cut from storage at the end of the cut"
    )


@pytest.mark.timeout(240)
async def test_gateways_all_cut_from_storage_keep_their_topics_and_resume_at_the_heal(tmp_path: Path) -> None:
    """Both gateways cut from two nodes: neither serves better, so the topic stays
    where it is (no hand-over back and forth) and publishing resumes soon after the heal."""
    outcome = await cut_owner_from_nodes(tmp_path, HOLD_S / 2, every_gateway=True)
    result = check(outcome.ops)
    print(f"\n[every gateway cut from two nodes] {result.line()}")
    print(f"[every gateway cut from two nodes] back after the heal (s): {outcome.back_after_heal_s}")
    assert not result.lost and not result.dual_acks, result.details()
    moved = outcome.owner_before_heal != outcome.owner_at_cut
    assert not moved, "the topic moved while no gateway reached storage"
    for producer in ("via-owner", "via-other"):
        back = outcome.back_after_heal_s.get(producer)
        assert back is not None and back < BOUND_S, f"{producer}: publishing resumed {back} s after the heal"


PEER_HOLD_S = 20.0
PEER_BOUND_S = LEASE_TTL_S + 12.0  # ping period + pong timeout + close wait (12 s), the peer connect timeout


@pytest.mark.timeout(240)
async def test_a_gateway_cut_from_the_owner_sends_its_clients_elsewhere(tmp_path: Path) -> None:
    """The owner's packets to the other gateway are dropped: a producer relayed there is
    closed with 4503 (reconnect) and a REST publish sent there is answered 503 with
    Retry-After, each within seconds - not held for the whole cut."""
    outcome = await cut_owner_from_peer(tmp_path, PEER_HOLD_S)
    print(f"\n[owner cut from its peer] {outcome}")
    assert outcome.ws_acked_before >= 4
    told = outcome.ws_told_after_s
    assert told is not None and told < PEER_BOUND_S, (
        f"relayed producer held {told} s of a {PEER_HOLD_S} s cut"
    )
    assert outcome.ws_close_code in (None, 4503), outcome
    assert outcome.rest_status == 503 and outcome.rest_retry_after, outcome
    assert outcome.rest_answer_s < PEER_BOUND_S, outcome


@pytest.mark.timeout(240)
async def test_an_owner_that_loses_etcds_answers_gives_its_topic_up_within_a_lease(tmp_path: Path) -> None:
    """etcd's packets to the owner are dropped, its requests still arrive: the owner steps
    down and the other gateway serves the topic within the lease TTL plus a few seconds
    (a guard: etcd keeping the stepped-down owner's lease alive would break it)."""
    outcome = await cut_owner_from_nodes(tmp_path, HOLD_S, etcd_answers=True)
    result = check(outcome.ops)
    print(f"\n[etcd's answers to the owner dropped] {result.line()}")
    print(f"[etcd's answers to the owner dropped] longest without an ack (s): {outcome.longest_gap_s}")
    print(
        f"[etcd's answers to the owner dropped] owner {outcome.owner_at_cut} -> {outcome.owner_before_heal}"
    )
    assert not result.lost and not result.dual_acks, result.details()
    back = outcome.back_after_s.get("via-other")
    assert back is not None and back < BOUND_S, (
        f"via-other: publishing resumed {back} s into a {HOLD_S} s cut"
    )
    assert outcome.owner_before_heal and outcome.owner_before_heal != outcome.owner_at_cut, (
        outcome.owner_before_heal
    )
