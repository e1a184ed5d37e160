"""The Spark writer's window of unacknowledged frames and its byte budget (pure)."""

from __future__ import annotations

import orjson
import pytest
from pyspark_folio.write_window import Budget, ReplyError, Verdict, Window


def _messages(first: int, count: int) -> tuple[bytes, int]:
    return orjson.dumps([{"payload": "eA==", "sequenceId": first + i} for i in range(count)]), count


def _ok(number: int, count: int, duplicate_at: int = -1) -> dict[str, object]:
    results = [
        {"result": "ok", "errorCode": 0, **({"duplicate": True} if i == duplicate_at else {})}
        for i in range(count)
    ]
    return {"type": "batch", "context": str(number), "results": results}


def test_replies_free_frames_in_order_and_count_rows():
    window = Window()
    first, second = window.add(*_messages(0, 3)), window.add(*_messages(3, 2))
    assert [f.number for f in window.unsent()] == [0, 1] and window.unsent() == []
    assert window.reply(_ok(0, 3, duplicate_at=1)) == (Verdict.STORED, first.size)
    with pytest.raises(ReplyError):  # a reply must answer the oldest frame
        window.reply(_ok(5, 2))
    assert window.reply(_ok(1, 2)) == (Verdict.STORED, second.size)
    assert (window.stored, window.duplicates, len(window.frames)) == (5, 1, 0)
    with pytest.raises(ReplyError):  # nothing outstanding
        window.reply(_ok(2, 1))


def test_a_lost_session_resends_every_unacknowledged_frame_unchanged():
    window = Window()
    frames = [window.add(*_messages(i * 10, 10)) for i in range(3)]
    sent = window.unsent()
    window.reply(_ok(0, 10))
    window.session_ended()
    again = window.unsent()
    assert [f.data for f in again] == [f.data for f in sent[1:]] == [f.data for f in frames[1:]]


def test_a_retriable_failure_keeps_the_failed_message_and_what_follows():
    window = Window()
    frame = window.add(*_messages(0, 4))
    window.unsent()
    results = [{"result": "ok", "errorCode": 0}, {"result": "send-error:1", "errorCode": 1}] + [
        {"result": "send-error:1", "errorCode": 1}
    ] * 2
    verdict, freed = window.reply({"type": "batch", "context": "0", "results": results})
    assert (verdict, freed, window.stored) == (Verdict.RESEND, 0, 1)
    window.session_ended()
    (resent,) = window.unsent()
    assert resent is frame and frame.count == 3
    assert [m["sequenceId"] for m in orjson.loads(resent.data)["messages"]] == [1, 2, 3]


def test_a_refusal_or_a_whole_frame_error_fails():
    window = Window()
    window.add(*_messages(0, 1))
    window.unsent()
    with pytest.raises(ReplyError, match="too big"):
        window.reply({"type": "batch", "context": "0", "results": [{"errorCode": 2, "errorMsg": "too big"}]})
    with pytest.raises(ReplyError, match="bad frame"):
        window.reply({"result": "send-error:3", "errorMsg": "bad frame", "errorCode": 2})


def test_a_frame_is_the_bytes_orjson_gives_for_it():
    window = Window()
    body, count = _messages(7, 2)
    frame = window.add(body, count)
    want = {"type": "batch", "context": "0", "messages": orjson.loads(body)}
    assert frame.data == orjson.dumps(want) and frame.size == len(frame.data)


def test_replies_taken_as_bytes_count_as_parsed_ones_and_fall_back_to_parsing():
    window = Window()
    first, second = window.add(*_messages(0, 3)), window.add(*_messages(3, 2))
    window.unsent()
    assert window.take(orjson.dumps(_ok(0, 3, duplicate_at=2))) == (Verdict.STORED, first.size)
    assert (window.stored, window.duplicates) == (3, 1)
    with pytest.raises(ReplyError):  # not the oldest frame: parsed, refused
        window.take(orjson.dumps(_ok(0, 2)))
    with pytest.raises(ReplyError):  # one result missing: parsed, refused
        window.take(orjson.dumps(_ok(1, 1)).decode())
    failed = _ok(1, 2)
    failed["results"][1] = {"result": "send-error:1", "errorCode": 1}  # type: ignore[index]
    assert window.take(orjson.dumps(failed).decode()) == (Verdict.RESEND, 0)
    assert (window.stored, second.count) == (4, 1)


def test_the_budget_is_over_past_its_bytes_and_one_frame_always_goes():
    budget = Budget(100)
    budget.take(60)
    assert not budget.over
    budget.take(60)  # a task takes no more rows now
    assert budget.over
    budget.give(60)
    assert not budget.over
    big = Budget(10)
    big.take(500)  # a frame larger than the budget is still taken, alone
    assert big.over
    big.give(500)
    assert big.used == 0 and not big.over


def test_a_later_frame_refused_at_once_resends_the_window_and_anything_else_out_of_order_fails():
    window = Window()
    frames = [window.add(*_messages(i * 2, 2)) for i in range(3)]
    window.unsent()
    retry = {"errorCode": 1, "errorMsg": "publish queue full, retry later"}
    early = {"type": "batch", "context": "2", "results": [{"result": "ok", "errorCode": 0}, retry]}
    assert window.reply(early) == (Verdict.RESEND, 0)  # frame 2 answered before frames 0 and 1
    window.session_ended()
    assert window.unsent() == frames  # every frame goes out again, unchanged
    refused = {"type": "batch", "context": "1", "results": [{"errorCode": 2}, retry]}
    with pytest.raises(ReplyError):  # a refusal out of order is not retried
        window.reply(refused)
    with pytest.raises(ReplyError):  # a frame never sent on this session
        window.reply({"type": "batch", "context": "7", "results": [retry, retry]})
