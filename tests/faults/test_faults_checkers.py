"""The fault run's checkers on hand-made histories: each finds the anomaly it is
for, and a clean history passes them all (folio/faults/checkers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from folio.cli import main
from folio.faults.checkers import check

pytestmark = pytest.mark.unit


def pub(
    t: float, producer: str, seq: int, ok: str | None = None, topic: str = "t", **extra: Any
) -> list[dict[str, Any]]:
    ops = [{"t": t, "type": "invoke", "f": "publish", "process": producer, "topic": topic, "seq": seq}]
    if ok is not None:
        ops.append(
            {
                "t": t + 0.01,
                "type": "ok",
                "f": "publish",
                "process": producer,
                "topic": topic,
                "seq": seq,
                "id": ok,
                **extra,
            }
        )
    return ops


def read(t: float, producer: str, seq: int, message_id: str, topic: str = "t") -> dict[str, Any]:
    return {
        "t": t,
        "type": "ok",
        "f": "read",
        "topic": topic,
        "producer": producer,
        "seq": seq,
        "id": message_id,
    }


def deliver(
    t: float, producer: str, seq: int, message_id: str, subtype: str, key: str | None = None
) -> dict[str, Any]:
    return {
        "t": t,
        "type": "ok",
        "f": "deliver",
        "process": "c",
        "topic": "t",
        "sub": "s",
        "subtype": subtype,
        "producer": producer,
        "seq": seq,
        "key": key,
        "id": message_id,
    }


def clean() -> list[dict[str, Any]]:
    ops = [
        *pub(1, "p", 0, "5:0:-1:-1"),
        *pub(2, "p", 1, "5:1:-1:-1"),
        *pub(3, "p", 2),
    ]  # seq 2: never answered
    ops += [read(10, "p", 0, "5:0:-1:-1"), read(10.1, "p", 1, "5:1:-1:-1"), read(10.2, "p", 2, "5:2:-1:-1")]
    return ops


def test_a_clean_history_passes() -> None:
    result = check(clean())
    assert result.safe, result.details()
    assert (result.acked, result.recovered, result.read) == (2, 1, 3)
    assert result.line().startswith(
        "acked=2 lost=0 unexpected=0 duplicated(dedup)=0 order_violations=0 cursor_regressions=0"
    )


def test_an_acked_message_missing_from_the_read_is_lost() -> None:
    ops = [op for op in clean() if not (op["f"] == "read" and op["seq"] == 1)]
    result = check(ops)
    assert result.lost == [("p", 1)] and not result.safe


def test_an_ack_for_an_id_the_log_does_not_hold_is_lost() -> None:
    # the value was stored again by a retry, but the id a zombie acked is in no ledger
    ops = [*pub(1, "p", 0, "10:0:-1:-1"), read(5, "p", 0, "11:0:-1:-1")]
    assert check(ops).lost == [("p", 0)]


def test_a_value_nobody_sent_is_unexpected() -> None:
    result = check([*clean(), read(11, "q", 7, "5:9:-1:-1")])
    assert result.unexpected == [("q", 7)]


def test_one_id_with_two_payloads_is_inconsistent() -> None:
    ops = [
        *pub(1, "p", 0, "5:0:-1:-1"),
        *pub(2, "p", 1, "5:1:-1:-1"),
        read(5, "p", 0, "5:0:-1:-1"),
        read(5, "p", 1, "5:0:-1:-1"),
    ]
    result = check(ops)
    assert result.inconsistent == [(5, 0, -1)]


def test_a_value_stored_twice_counts_only_with_dedup() -> None:
    ops = [
        *pub(1, "p", 0, "5:0:-1:-1", topic="d"),
        read(5, "p", 0, "5:0:-1:-1", "d"),
        read(5, "p", 0, "6:0:-1:-1", "d"),
    ]
    assert check(ops, dedup_topics=["d"]).duplicated_dedup == [("p", 0)]
    assert check(ops).duplicated_dedup == []
    # the same copy read twice (a reader that restarted) is one copy
    again = [
        *pub(1, "p", 0, "5:0:-1:-1", topic="d"),
        read(5, "p", 0, "5:0:-1:-1", "d"),
        read(6, "p", 0, "5:0:-1:-1", "d"),
    ]
    assert check(again, dedup_topics=["d"]).duplicated_dedup == []


def test_order_in_the_log_and_per_key_deliveries() -> None:
    ops = [*pub(1, "p", 0, "5:0:-1:-1"), *pub(2, "p", 1, "5:1:-1:-1")]
    swapped = [*ops, read(5, "p", 1, "5:1:-1:-1"), read(5.1, "p", 0, "5:0:-1:-1")]
    assert len(check(swapped).order_violations) == 1
    # a retry storing seq 0 again after seq 1 is fine: first occurrences are in order
    retried = [
        *ops,
        read(5, "p", 0, "5:0:-1:-1"),
        read(5.1, "p", 1, "5:1:-1:-1"),
        read(5.2, "p", 0, "5:2:-1:-1"),
    ]
    assert check(retried).order_violations == []
    keyed = [
        *ops,
        deliver(4, "p", 1, "5:1:-1:-1", "Key_Shared", "k"),
        deliver(4.1, "p", 0, "5:0:-1:-1", "Key_Shared", "k"),
    ]
    assert len(check(keyed).order_violations) == 1
    other_keys = [
        *ops,
        deliver(4, "p", 1, "5:1:-1:-1", "Key_Shared", "a"),
        deliver(4.1, "p", 0, "5:0:-1:-1", "Key_Shared", "b"),
    ]
    assert check(other_keys).order_violations == []
    shared = [*ops, deliver(4, "p", 1, "5:1:-1:-1", "Shared"), deliver(4.1, "p", 0, "5:0:-1:-1", "Shared")]
    assert check(shared).order_violations == []
    exclusive = [
        *ops,
        deliver(4, "p", 1, "5:1:-1:-1", "Exclusive"),
        deliver(4.1, "p", 0, "5:0:-1:-1", "Exclusive"),
    ]
    assert len(check(exclusive).order_violations) == 1


def test_a_persisted_cursor_going_back_is_a_regression() -> None:
    def cursor(t: float, mark: list[int]) -> dict[str, Any]:
        return {"t": t, "type": "ok", "f": "cursor", "topic": "x", "sub": "s", "mark": mark}

    assert check([cursor(1, [5, 3]), cursor(2, [5, 3]), cursor(3, [6, -1])]).cursor_regressions == []
    assert check([cursor(1, [5, 3]), cursor(2, [5, 1])]).cursor_regressions == [("x", "s", [5, 3], [5, 1])]


def test_unavailability_is_measured_per_fault_kind_on_the_worst_topic() -> None:
    ops = [{"t": 10.0, "type": "info", "f": "fault", "kind": "kill-node", "phase": "start"}]
    ops += pub(9, "a", 0, "1:0:-1:-1", topic="a")  # sent before the fault: does not count
    ops += pub(10.5, "a", 1, "1:1:-1:-1", topic="a")  # a: back after 0.51 s
    ops += pub(11, "b", 0) + pub(13.99, "b", 0, "2:0:-1:-1", topic="b")  # b: back after 4 s
    ops[-1]["topic"] = "b"
    ops[-2]["topic"] = "b"
    ops[-3]["topic"] = "b"
    result = check(ops)
    assert result.faults == {"kill-node": 1}
    assert result.unavailability["kill-node"].seconds == [pytest.approx(4.0)]
    assert "kill-node=max 4.0s" in result.unavailability_line()


def test_a_topic_still_down_from_the_previous_fault_is_inherited_not_owned() -> None:
    def start(t: float, kind: str) -> dict[str, Any]:
        return {"t": t, "type": "info", "f": "fault", "kind": kind, "phase": "start"}

    ops = [start(10.0, "kill-node"), start(12.0, "pause-node")]
    ops += pub(9, "pa", 0, "1:0:-1:-1", topic="a") + pub(10.5, "pa", 1, topic="a")  # a: no answer...
    ops += pub(19.99, "pa", 2, "1:2:-1:-1", topic="a")  # ...until 20.0: down through both faults
    ops += pub(10.29, "pb", 0, "2:0:-1:-1", topic="b")  # b: back 0.3 s after the kill
    ops += pub(12.49, "pb", 1, "2:1:-1:-1", topic="b")  # and 0.5 s after the pause
    result = check(ops)
    # until publishes succeed again: a's outage is charged to both faults
    assert result.unavailability["kill-node"].seconds == [pytest.approx(10.0)]
    assert result.unavailability["pause-node"].seconds == [pytest.approx(8.0)]
    # own: a had not recovered from the kill when the pause began, so the pause owns only b
    assert result.unavailability_own["kill-node"].seconds == [pytest.approx(10.0)]
    assert result.unavailability_own["pause-node"].seconds == [pytest.approx(0.5)]
    assert result.inherited == 1
    assert result.unavailability_line().startswith("unavailability kill-node=max 10.0s p50 10.0s (n=1) ")
    assert result.unavailability_own_line() == (
        "unavailability_own kill-node=max 10.0s p50 10.0s (n=1) "
        "pause-node=max 0.5s p50 0.5s (n=1) inherited=1"
    )
    # a third fault while both topics are still down from the second owns no window at all
    both_down = check([*ops, start(12.2, "kill-etcd")])
    assert both_down.unavailability["kill-etcd"].seconds == [pytest.approx(7.8)]
    assert "kill-etcd" not in both_down.unavailability_own and both_down.inherited == 3


def write_run(root: Path, ops: list[dict[str, Any]]) -> Path:
    root.mkdir()
    (root / "history.jsonl").write_bytes(b"".join(orjson.dumps(op) + b"\n" for op in ops))
    return root


def test_check_re_runs_the_checkers_on_a_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ops = [{"t": 10.0, "type": "info", "f": "fault", "kind": "kill-node", "phase": "start"}]
    ops += pub(10.5, "p", 0, "1:0:-1:-1") + pub(11, "p", 1, "1:1:-1:-1")
    clean = write_run(
        tmp_path / "clean", [*ops, read(20, "p", 0, "1:0:-1:-1"), read(20, "p", 1, "1:1:-1:-1")]
    )
    assert main(["faults", "--check", str(clean)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("acked=2 lost=0 ")
    assert out[2] == "unavailability kill-node=max 0.5s p50 0.5s (n=1)"
    assert out[3] == "unavailability_own kill-node=max 0.5s p50 0.5s (n=1) inherited=0"
    lossy = write_run(tmp_path / "lossy", [*ops, read(20, "p", 0, "1:0:-1:-1")])
    assert main(["faults", "--check", str(lossy)]) == 1
    assert "lost: [('p', 1)]" in capsys.readouterr().out
    with (lossy / "history.jsonl").open("ab") as cut:  # a run killed mid-write
        cut.write(b'{"t": 21.0, "type": "ok", "f": "cur')
    assert main(["faults", "--check", str(lossy)]) == 1
    assert main(["faults", "--check", str(tmp_path / "missing")]) == 2


def test_after_the_final_heal_is_measured_apart_from_the_faults() -> None:
    ops = [{"t": 20.0, "type": "info", "f": "healed", "process": "nemesis"}]
    ops += pub(21, "a", 0, "1:0:-1:-1", topic="a")
    result = check(ops)
    assert not result.faults
    assert result.unavailability["after-final-heal"].seconds == [pytest.approx(1.01)]


def test_an_ack_while_two_of_three_nodes_were_dead_has_no_quorum() -> None:
    ops = [
        {"t": 10.0, "type": "info", "f": "fault", "kind": "kill-two-nodes", "phase": "start"},
        {"t": 14.0, "type": "info", "f": "fault", "kind": "kill-two-nodes", "phase": "restart", "down": 2},
    ]
    ops += pub(9, "p", 0, "1:0:-1:-1")  # sent before the kill: may be acked late
    ops += pub(11, "p", 1, "1:1:-1:-1")  # sent and acked while both were dead
    ops += pub(13.995, "p", 2, "1:2:-1:-1")  # answered after the restart began
    ops += pub(12, "p", 3, "-1:-1:-1:-1", duplicate=True)  # a duplicate writes nothing
    reads = [read(20, "p", s, f"1:{s}:-1:-1") for s in range(3)]
    result = check([*ops, *reads])
    assert result.acks_without_quorum == [("p", 1)] and not result.safe
    one_down = [{**op, "down": 1} if op.get("phase") == "restart" else op for op in ops]
    assert check([*one_down, *reads]).acks_without_quorum == []


def test_the_window_without_quorum_opens_when_every_target_has_exited() -> None:
    # seed 202's long run: a publish sent as kill-all-nodes began was made durable by
    # nodes not yet killed (the kills are sequential) and acked 0.1 s later
    ops = [
        {"t": 10.0, "type": "info", "f": "fault", "kind": "kill-all-nodes", "phase": "start"},
        {"t": 10.2, "type": "info", "f": "fault", "kind": "kill-all-nodes", "phase": "down", "down": 3},
        {"t": 12.0, "type": "info", "f": "fault", "kind": "kill-all-nodes", "phase": "restart", "down": 3},
    ]
    ops += pub(10.0, "p", 0, "1:0:-1:-1")  # sent as the kills began, acked at 10.01
    ops += pub(10.5, "p", 1, "1:1:-1:-1")  # sent when every node was dead: cannot be durable
    reads = [read(20, "p", s, f"1:{s}:-1:-1") for s in range(2)]
    assert check([*ops, *reads]).acks_without_quorum == [("p", 1)]
    without_down = [op for op in ops if op.get("phase") != "down"]
    assert check([*without_down, *reads]).acks_without_quorum == [("p", 0), ("p", 1)]


def test_step_down_of_woken_owners_is_reported() -> None:
    heal = {"t": 5.0, "type": "info", "f": "fault", "kind": "pause-owner-gateway", "phase": "heal"}
    result = check(
        [
            {**heal, "stepped_down_s": 1.5},
            {**heal, "stepped_down_s": 0.4},
            {**heal, "still_running_after_s": 10},
        ]
    )
    assert result.step_down_s == [1.5, 0.4] and result.owners_still_running == 1
    assert (
        "paused owners stepped down max 1.5s after waking (n=2), still running 1"
        in result.unavailability_line()
    )


def test_power_loss_drops_are_summed_over_the_power_loss_faults() -> None:
    def heal(t: float, **detail: Any) -> dict[str, Any]:
        return {"t": t, "type": "info", "f": "fault", "kind": "power-loss-node", "phase": "heal", **detail}

    ops = [
        heal(1.0, unsynced_bytes_dropped=0, unsynced_records_dropped=0, torn=False),
        heal(2.0, unsynced_bytes_dropped=900, unsynced_records_dropped=3, torn=True),
        heal(3.0, unsynced_bytes_dropped=100, unsynced_records_dropped=1, torn=False),
        {"t": 4.0, "type": "info", "f": "fault", "kind": "kill-node", "phase": "heal"},
    ]
    result = check(ops)
    assert (result.powerloss_faults, result.powerloss_biting) == (3, 2)
    assert (result.powerloss_dropped_bytes, result.powerloss_dropped_records) == (1000, 4)
    assert "powerloss_dropped_bytes=1000 records=4 over 3 faults (2 dropped something)" in result.line()


def test_a_handover_is_not_a_dual_ack() -> None:
    # the old owner acks in ledger 1, the new one in ledger 2: every publish of
    # ledger 1 was sent before ledger 2's first ack (an ack may arrive late)
    ops = [*pub(0.0, "p", 0, "1:0:-1:-1"), *pub(1.0, "p", 1, "1:1:-1:-1"), *pub(2.0, "p", 2, "2:0:-1:-1")]
    ops[3]["t"] = 2.5  # seq 1's ack reaches the producer after ledger 2 began
    ops += [read(9.0, "p", s, i) for s, i in ((0, "1:0:-1:-1"), (1, "1:1:-1:-1"), (2, "2:0:-1:-1"))]
    result = check(ops)
    assert not result.dual_acks and result.safe, result.details()


def test_an_old_tenure_acking_after_a_new_one_began_is_a_dual_ack() -> None:
    # a gateway that kept acknowledging into its ledger 1 after another began ledger 2
    ops = [
        *pub(0.0, "a", 0, "1:0:-1:-1"),
        *pub(1.0, "b", 0, "2:0:-1:-1"),
        *pub(2.0, "a", 1, "1:1:-1:-1"),
        *pub(3.0, "b", 1, "2:1:-1:-1"),
    ]
    result = check(ops)
    assert result.dual_acks == [("t", 1, 2, ("a", 1))]
    assert not result.safe and "dual_acks=1" in result.line()


def test_dual_acks_are_per_partition_and_skip_duplicates() -> None:
    ops = [
        *pub(0.0, "a", 0, "1:0:0:-1", topic="part"),
        *pub(1.0, "b", 0, "2:0:1:-1", topic="part"),  # another partition: another owner is fine
        *pub(2.0, "a", 1, "1:1:0:-1", topic="part"),
        *pub(3.0, "c", 0, "3:0:0:-1", topic="part"),
        *pub(4.0, "a", 0, "1:0:0:-1", topic="part", duplicate=True),  # a retry answered with the old id
    ]
    assert check(ops).dual_acks == []
