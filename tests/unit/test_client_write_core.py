"""The writer core: in-order completion, LAC, backpressure, ensemble change, fencing."""

from __future__ import annotations

import random

import pytest

from storage import wire
from storage.client.write_core import WriteCore
from storage.client.write_effects import (
    CompleteAdds,
    FailAll,
    FindNodes,
    SendAdd,
    WriterConfig,
    WriteSegment,
    apply_segment,
)
from storage.errors import Fenced, MetadataConflict, QuorumLost, Status
from storage.types import LedgerMetadata, LedgerState, NodeInfo, Segment

pytestmark = pytest.mark.unit

OK = Status.OK


def md(ensemble: tuple[str, ...] = ("A", "B", "C"), qw: int = 3, qa: int = 2) -> LedgerMetadata:
    return LedgerMetadata(7, len(ensemble), qw, qa, LedgerState.OPEN, (Segment(0, ensemble),))


def info(name: str, read_only: bool = False) -> NodeInfo:
    return NodeInfo(name, name, "", 10 << 30, 20 << 30, 0.0, read_only)


def append(core: WriteCore, payload: bytes = b"x", now: int = 0) -> tuple[int, SendAdd]:
    entry_id, effects = core.on_append(payload, now)
    assert len(effects) == 1 and isinstance(effects[0], SendAdd)
    return entry_id, effects[0]


def test_entries_get_ids_in_order_and_go_to_their_write_set() -> None:
    core = WriteCore(md(("A", "B", "C", "D"), qw=3))
    sends = [append(core)[1] for _ in range(5)]
    assert [s.entry_id for s in sends] == [0, 1, 2, 3, 4]
    assert [s.nodes for s in sends] == [
        ("A", "B", "C"),
        ("B", "C", "D"),
        ("C", "D", "A"),
        ("D", "A", "B"),
        ("A", "B", "C"),
    ]


def test_completion_is_strictly_in_entry_order_and_lac_is_piggybacked() -> None:
    core = WriteCore(md())
    for _ in range(3):
        append(core)
    # entry 2 and 1 reach quorum first: nothing completes
    assert core.on_add_response("A", 2, OK, 1) == []
    assert core.on_add_response("B", 2, OK, 1) == []
    assert core.on_add_response("A", 1, OK, 1) == []
    assert core.on_add_response("C", 1, OK, 1) == []
    assert core.lac == -1
    assert core.on_add_response("A", 0, OK, 1) == []  # one ack is not a quorum
    assert core.on_add_response("B", 0, OK, 1) == [CompleteAdds(2)]
    assert core.lac == 2 and core.outstanding == 0
    # the next add carries LAC 2
    _, send = append(core)
    *_, body = wire.parse_add(send.body)
    entry = wire.decode_entry(body)
    assert (entry.entry_id, entry.lac, entry.payload) == (3, 2, b"x")


def test_duplicate_and_stranger_acks_do_not_count() -> None:
    core = WriteCore(md())
    append(core)
    assert core.on_add_response("A", 0, OK, 0) == []
    assert core.on_add_response("A", 0, OK, 0) == []
    assert core.on_add_response("Z", 0, OK, 0) == []
    assert core.lac == -1
    assert core.on_add_response("C", 0, OK, 0) == [CompleteAdds(0)]
    assert core.on_add_response("B", 0, OK, 0) == []  # late third ack: harmless


def test_striped_write_set_ack_from_non_member_is_ignored() -> None:
    core = WriteCore(md(("A", "B", "C", "D"), qw=2, qa=2))
    append(core)  # entry 0 -> A, B
    assert core.on_add_response("C", 0, OK, 0) == []
    assert core.on_add_response("A", 0, OK, 0) == []
    assert core.on_add_response("B", 0, OK, 0) == [CompleteAdds(0)]


def test_backpressure_bounds_outstanding_adds_and_bytes() -> None:
    core = WriteCore(md(), WriterConfig(outstanding_adds_max=2, outstanding_bytes_max=100))
    assert core.can_accept(10)
    append(core, b"a" * 10)
    append(core, b"b" * 10)
    assert not core.can_accept(1)  # count bound hit
    core.on_add_response("A", 0, OK, 0)
    core.on_add_response("B", 0, OK, 0)
    assert core.can_accept(10)
    assert not core.can_accept(95)  # byte bound: 10 outstanding + 95 > 100
    core.on_add_response("A", 1, OK, 0)
    core.on_add_response("B", 1, OK, 0)
    assert core.can_accept(1000)  # one add larger than the bound is allowed when idle


def change_to(core: WriteCore, nodes: list[NodeInfo], now: int = 0) -> WriteSegment:
    effects = core.on_live_nodes(nodes, now)
    assert len(effects) == 1 and isinstance(effects[0], WriteSegment)
    return effects[0]


def test_ensemble_change_resends_unconfirmed_entries_and_discards_old_acks() -> None:
    core = WriteCore(md(), rng=random.Random(0))
    for _ in range(4):
        append(core)
    for node in ("A", "B"):
        core.on_add_response(node, 0, OK, 0)  # entry 0 confirmed
    assert core.lac == 0
    core.on_add_response("C", 1, OK, 0)  # entry 1: one ack from C (the node about to fail)
    assert core.on_add_response("C", 2, Status.UNAVAILABLE, 5) == [FindNodes(frozenset({"C"}))]
    assert core.changing_ensemble
    # acks during the change are recorded but nothing completes
    assert core.on_add_response("A", 1, OK, 6) == []
    assert core.lac == 0
    change = change_to(core, [info("A"), info("B"), info("C"), info("D")])
    assert change == WriteSegment(1, ("A", "B", "C"), ("A", "B", "D"), frozenset({"C"}))
    new_md = apply_segment(core.metadata, change)
    # C may lack entries of the old segment: it is marked for the auditor
    assert new_md.segments == (Segment(0, ("A", "B", "C"), frozenset({"C"})), Segment(1, ("A", "B", "D")))
    assert LedgerMetadata.from_json(new_md.to_json()) == new_md
    effects = core.on_segment_written(new_md, 10)
    sends = [e for e in effects if isinstance(e, SendAdd)]
    assert [(s.entry_id, s.nodes) for s in sends] == [(1, ("D",)), (2, ("D",)), (3, ("D",))]
    assert not any(isinstance(e, CompleteAdds) for e in effects)  # C's ack on entry 1 was discarded
    assert core.on_add_response("C", 3, OK, 11) == []  # replaced member: ignored
    assert core.on_add_response("D", 1, OK, 11) == [CompleteAdds(1)]
    # new appends go to the new ensemble
    _, send = append(core)
    assert send.nodes == ("B", "D", "A") and send.entry_id == 4
    assert core.ensemble_changes == 1


def test_confirmed_entries_are_unaffected_by_a_change() -> None:
    core = WriteCore(md())
    append(core)
    core.on_add_response("A", 0, OK, 0)
    core.on_add_response("B", 0, OK, 0)
    core.on_add_response("C", 0, Status.UNAVAILABLE, 0)
    change = change_to(core, [info(n) for n in "ABCD"])
    assert change.first_entry_id == 1
    assert core.on_segment_written(apply_segment(core.metadata, change), 1) == []
    assert core.lac == 0


def test_striped_change_only_resends_entries_whose_write_set_moved() -> None:
    core = WriteCore(md(("A", "B", "C", "D"), qw=2, qa=2))
    for _ in range(4):
        append(core)  # 0:AB 1:BC 2:CD 3:DA
    core.on_node_failure("B", 0)
    change = change_to(core, [info(n) for n in "ABCDE"])
    effects = core.on_segment_written(apply_segment(core.metadata, change), 1)
    assert [(e.entry_id, e.nodes) for e in effects if isinstance(e, SendAdd)] == [(0, ("E",)), (1, ("E",))]


def test_second_failure_during_change_starts_another_change() -> None:
    core = WriteCore(md())
    append(core)
    core.on_node_failure("C", 0)
    change = change_to(core, [info(n) for n in "ABCDE"])
    assert core.on_node_failure("B", 1) == []  # noted; the change in flight lands first
    effects = core.on_segment_written(apply_segment(core.metadata, change), 2)
    assert effects[-1] == FindNodes(frozenset({"B"}))
    change2 = change_to(core, [info(n) for n in "ABCDE"])
    assert change2.first_entry_id == 0 and "B" not in change2.ensemble
    new_md = apply_segment(core.metadata, change2)
    assert len(new_md.segments) == 1  # same first entry: the segment is replaced
    core.on_segment_written(new_md, 3)
    assert set(core.metadata.last_ensemble) == {"A", "D", "E"}


def test_fenced_fails_everything_and_the_writer_is_done() -> None:
    core = WriteCore(md())
    append(core)
    append(core)
    effects = core.on_add_response("B", 1, Status.FENCED, 0)
    assert len(effects) == 1 and isinstance(effects[0], FailAll) and isinstance(effects[0].error, Fenced)
    assert core.on_add_response("A", 0, OK, 0) == []
    assert core.on_node_failure("A", 0) == []
    assert core.error is not None


def test_add_timeout_counts_as_node_failure() -> None:
    core = WriteCore(md(), WriterConfig(add_timeout_ms=100))
    append(core, now=0)
    assert core.next_deadline_ms() == 0  # first look at the members' progress
    assert core.on_timer(0) == []
    core.on_add_response("A", 0, OK, 10)
    assert core.next_deadline_ms() == 25  # members are checked every add_timeout_ms / 4
    assert core.on_timer(99) == []
    effects = core.on_timer(100)
    assert effects == [FindNodes(frozenset({"B", "C"}))]


def test_a_silent_member_fails_even_when_its_entries_were_confirmed_without_it() -> None:
    core = WriteCore(md(), WriterConfig(add_timeout_ms=100))
    for entry_id in range(5):
        append(core, now=entry_id)
        core.on_add_response("A", entry_id, OK, entry_id)
        core.on_add_response("B", entry_id, OK, entry_id)
    assert core.lac == 4 and core.outstanding == 0
    assert core.on_timer(60) == []
    assert core.on_timer(99) == []  # C's clock started with its first add, at 0
    assert core.on_timer(100) == []  # members are looked at every 25 ms: next at 124
    assert core.on_timer(124) == [FindNodes(frozenset({"C"}))]


def test_an_idle_member_is_not_timed_out_when_adds_resume() -> None:
    core = WriteCore(md(), WriterConfig(add_timeout_ms=100))
    append(core, now=0)
    for node in "ABC":
        core.on_add_response(node, 0, OK, 1)
    assert core.on_timer(5) == []
    append(core, now=10_000)  # long idle, then one more add
    assert core.on_timer(10_050) == []
    core.on_add_response("A", 1, OK, 10_060)
    core.on_add_response("B", 1, OK, 10_060)
    assert core.on_timer(10_099) == []
    assert core.on_timer(10_124) == [FindNodes(frozenset({"C"}))]


def test_no_replacement_keeps_writing_degraded_while_quorum_is_possible() -> None:
    core = WriteCore(md(), WriterConfig(ensemble_retry_ms=500))
    append(core)
    core.on_add_response("A", 0, OK, 0)
    core.on_add_response("C", 0, Status.UNAVAILABLE, 0)
    assert core.on_live_nodes([info(n) for n in "ABC"], 0) == []
    core.on_add_response("B", 0, OK, 1)
    assert core.lac == 0  # completions continue
    _, send = append(core)
    assert send.nodes == ("B", "A")  # the failed member is skipped (write set B, C, A)
    assert core.on_timer(499) == []
    assert core.on_timer(500) == [FindNodes(frozenset({"C"}))]
    change = change_to(core, [info(n) for n in "ABCD"], 501)
    assert change.first_entry_id == 1 and change.ensemble == ("A", "B", "D")


def test_quorum_lost_when_no_replacement_and_too_few_members() -> None:
    core = WriteCore(md())
    append(core)
    core.on_node_failure("C", 0)
    core.on_node_failure("B", 0)
    effects = core.on_live_nodes([info(n) for n in "ABC"], 0)
    assert len(effects) == 1 and isinstance(effects[0], FailAll) and isinstance(effects[0].error, QuorumLost)


def test_segment_cas_failure_fails_the_writer() -> None:
    core = WriteCore(md())
    append(core)
    core.on_node_failure("A", 0)
    change = change_to(core, [info(n) for n in "ABCD"])
    recovering = core.metadata.with_changes(state=LedgerState.IN_RECOVERY)
    with pytest.raises(Fenced):
        apply_segment(recovering, change)
    effects = core.on_segment_failed(Fenced("x"), 0)
    assert isinstance(effects[0], FailAll)


def test_apply_segment_detects_a_concurrent_ensemble_change() -> None:
    current = md().with_changes(segments=(Segment(0, ("A", "B", "X")),))
    with pytest.raises(MetadataConflict):
        apply_segment(current, WriteSegment(3, ("A", "B", "C"), ("A", "B", "D")))


@pytest.mark.parametrize("seed", range(20))
def test_random_ack_orders_match_a_naive_model(seed: int) -> None:
    """Against a naive model: LAC = longest prefix whose entries each have >= Qa acks."""
    rng = random.Random(seed)
    ensemble = ("A", "B", "C", "D", "E")
    qw, qa = rng.choice([(3, 2), (5, 3), (2, 2), (3, 1)])
    core = WriteCore(md(ensemble, qw=qw, qa=qa))
    acks: dict[int, set[str]] = {}
    outstanding: list[tuple[str, int]] = []
    last_lac = -1
    for _ in range(300):
        if rng.random() < 0.3 and core.can_accept(1):
            entry_id, send = append(core)
            acks[entry_id] = set()
            outstanding.extend((n, entry_id) for n in send.nodes)
        elif outstanding:
            node, entry_id = outstanding.pop(rng.randrange(len(outstanding)))
            effects = core.on_add_response(node, entry_id, OK, 0)
            acks[entry_id].add(node)
            model = -1
            while model + 1 in acks and len(acks[model + 1]) >= qa:
                model += 1
            assert core.lac == model
            if effects:
                assert effects == [CompleteAdds(model)] and model > last_lac
            last_lac = core.lac


def test_a_failed_member_takes_its_slot_back_once_it_answers_after_its_back_off() -> None:
    core = WriteCore(md(), WriterConfig(ensemble_retry_ms=500, node_retry_ms=1_000))
    append(core)
    assert core.on_add_response("C", 0, Status.UNAVAILABLE, 0) == [FindNodes(frozenset({"C"}), frozenset())]
    for node in ("A", "B"):
        core.on_add_response(node, 0, OK, 1)
    live = [info(n) for n in "ABC"]
    # C is registered but backing off: degraded, the completions held back go out
    assert core.on_live_nodes(live, 1, answered={"C"}) == [CompleteAdds(0)]
    assert core.on_timer(501) == [FindNodes(frozenset({"C"}), frozenset())]  # still backing off: no probe
    assert core.on_live_nodes(live, 501, answered=()) == []
    assert core.on_timer(1_001) == [FindNodes(frozenset({"C"}), frozenset({"C"}))]  # probe C now
    assert core.on_live_nodes(live, 1_001, answered=()) == []  # registered, but did not answer
    core.on_timer(1_501)
    change = change_to_answered(core, live, 1_501, {"C"})
    assert change == WriteSegment(1, ("A", "B", "C"), ("A", "B", "C"), frozenset({"C"}))
    append(core)  # entry 1 waits for the segment; C is still skipped until it lands
    effects = core.on_segment_written(apply_segment(core.metadata, change), 1_502)
    assert [(e.entry_id, e.nodes) for e in effects if isinstance(e, SendAdd)] == [(1, ("C",))]
    assert core.failed_nodes == frozenset()
    _, send = append(core)
    assert set(send.nodes) == {"A", "B", "C"}  # written to all three again


def change_to_answered(core: WriteCore, nodes: list[NodeInfo], now: int, answered: set[str]) -> WriteSegment:
    effects = core.on_live_nodes(nodes, now, answered)
    assert len(effects) == 1 and isinstance(effects[0], WriteSegment), effects
    return effects[0]


def test_one_node_down_back_then_another_down_keeps_the_quorum() -> None:
    """With 3 nodes: C fails, comes back and is readmitted; then B fails. Without
    readmission the writer had only A left of its write set and lost its quorum."""
    core = WriteCore(md(), WriterConfig(ensemble_retry_ms=500, node_retry_ms=1_000))
    live = [info(n) for n in "ABC"]
    core.on_node_failure("C", 0)
    assert core.on_live_nodes([info("A"), info("B")], 0) == []  # degraded on A, B
    core.on_timer(1_000)
    core.on_segment_written(apply_segment(core.metadata, change_to_answered(core, live, 1_000, {"C"})), 1_001)
    assert core.failed_nodes == frozenset()
    core.on_node_failure("B", 11_000)
    assert core.on_live_nodes([info("A"), info("C")], 11_000) == []  # degraded on A, C: no error
    assert core.error is None
    entry_id, send = append(core, now=11_001)
    assert set(send.nodes) == {"A", "C"}
    core.on_add_response("A", entry_id, OK, 11_002)
    assert core.on_add_response("C", entry_id, OK, 11_002) == [CompleteAdds(entry_id)]


def test_back_off_doubles_with_each_failure_of_a_node() -> None:
    core = WriteCore(md(), WriterConfig(node_retry_ms=1_000, node_retry_max_ms=3_000))
    live = [info(n) for n in "ABC"]
    now = 0
    for expected in (1_000, 2_000, 3_000, 3_000):
        core.on_node_failure("C", now)
        assert core.backing_off(now + expected - 1) == frozenset({"C"})
        assert core.backing_off(now + expected) == frozenset()
        core.on_live_nodes(live, now)  # degraded
        now += expected
        core.on_timer(now)
        core.on_segment_written(apply_segment(core.metadata, change_to_answered(core, live, now, {"C"})), now)


def test_a_read_only_member_is_replaced_and_never_readmitted_while_read_only() -> None:
    core = WriteCore(md(), WriterConfig(node_retry_ms=10))
    append(core)
    core.on_add_response("C", 0, Status.READ_ONLY, 0)
    nodes = [info("A"), info("B"), info("C", read_only=True)]
    assert core.on_live_nodes(nodes, 100, answered={"C"}) == []  # answers, but read-only
    core.on_timer(2_000)
    assert change_to_answered(core, [*nodes, info("D")], 2_000, {"C"}).ensemble == ("A", "B", "D")


def test_closing_records_the_members_the_writer_went_on_without() -> None:
    from storage.client.writer import close_writer

    current = md()
    closed = close_writer(current, 9, 100, frozenset({"C"}))
    assert closed is not None and closed.segments == (Segment(0, ("A", "B", "C"), frozenset({"C"})),)
    assert close_writer(current, 9, 100) == current.with_changes(
        state=LedgerState.CLOSED, last_entry_id=9, length=100
    )
    empty = close_writer(current, -1, 0, frozenset({"C"}))  # nothing written: nothing missing
    assert empty is not None and not empty.segments[0].missing


def test_a_node_that_failed_is_no_replacement_elsewhere_until_it_answers() -> None:
    core = WriteCore(md(), WriterConfig(node_retry_ms=100))
    core.on_node_failure("C", 0)
    core.on_segment_written(
        apply_segment(core.metadata, change_to(core, [info(n) for n in "ABCD"], 0)), 0
    )  # C -> D
    effects = core.on_node_failure("A", 5_000)
    assert effects == [FindNodes(frozenset({"A"}), frozenset({"C"}))]  # C past its back-off: probe it
    nodes = [info(n) for n in "ABCD"]
    assert core.on_live_nodes(nodes, 5_000, answered=()) == []  # C registered but silent (paused): not used
    assert core.on_timer(6_000) == [FindNodes(frozenset({"A"}), frozenset({"A", "C"}))]  # retry
    change = change_to_answered(core, nodes, 6_000, {"C"})
    assert change.ensemble == ("C", "B", "D")  # it answered: usable again
