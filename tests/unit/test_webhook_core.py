"""Push subscriptions: the pure decisions (back-off, batches, plans) and the settings parser."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from gateway.broker.webhook_core import (
    POST_BYTES_MAX,
    Backoff,
    attempt_outcome,
    plan,
    should_dead_letter,
    take_batch,
)
from gateway.protocol.errors import BadRequest
from gateway.protocol.webhook_config import BOUNDS, WebhookConfig, host_allowed, parse_webhook


def test_backoff_doubles_up_to_the_cap_and_resets_on_success() -> None:
    backoff = Backoff(100, 1000)
    assert backoff.wait_ms(0) == 0
    delays = [backoff.on_failure(0) for _ in range(6)]
    assert delays == [100, 200, 400, 800, 1000, 1000]
    assert backoff.wait_ms(400) == 600 and backoff.wait_ms(5000) == 0
    backoff.on_success()
    assert backoff.wait_ms(0) == 0 and backoff.on_failure(10) == 100


def test_backoff_cap_below_the_start_caps_every_delay() -> None:
    backoff = Backoff(500, 50)
    assert [backoff.on_failure(0) for _ in range(3)] == [50, 50, 50]


def test_backoff_survives_many_failures() -> None:
    backoff = Backoff(10, 600_000)
    for _ in range(500):
        backoff.on_failure(0)
    assert backoff.on_failure(0) == 600_000


def test_take_batch_bounds_messages_and_bytes_but_takes_at_least_one() -> None:
    buffer = deque([10, 10, 10, 10, 10])
    assert take_batch(buffer, lambda n: n, 3, 1000) == [10, 10, 10]
    assert take_batch(buffer, lambda n: n, 3, 15) == [10]
    assert list(buffer) == [10]
    huge = deque([POST_BYTES_MAX * 2, 1])
    assert take_batch(huge, lambda n: n, 10, POST_BYTES_MAX) == [POST_BYTES_MAX * 2]
    assert take_batch(deque(), lambda n: n, 10, 10) == []


def test_outcomes_and_dead_lettering() -> None:
    assert [attempt_outcome(s) for s in (200, 204, 299)] == [True] * 3
    assert [attempt_outcome(s) for s in (None, 199, 301, 404, 429, 500, 503)] == [False] * 7
    assert not should_dead_letter(100, 0)  # 0: retry forever
    assert not should_dead_letter(2, 3) and should_dead_letter(3, 3)


def test_plan_starts_new_and_changed_and_stops_gone_and_changed() -> None:
    stored = {"a": 1, "b": 5, "c": 7}
    running = {"a": 1, "b": 4, "d": 2}
    start, stop = plan(stored, running)
    assert sorted(start) == ["b", "c"] and sorted(stop) == ["b", "d"]
    assert plan({}, {}) == ([], [])


def _parse(**fields: Any) -> WebhookConfig:
    return parse_webhook({"url": "http://127.0.0.1:9/x", **fields})


def test_defaults_and_round_trip() -> None:
    config = _parse()
    assert config.subscriptionType == "Shared" and config.maxMessages == 100 and config.maxInFlight == 1
    assert parse_webhook(config.to_json()) == config
    secret = _parse(headers={"Authorization": "Bearer x"})
    assert secret.public_json()["headers"] == {"Authorization": "***"}
    assert secret.to_json()["headers"] == {"Authorization": "Bearer x"}


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_every_number_is_bounded(name: str) -> None:
    _default, low, high = BOUNDS[name]
    assert getattr(_parse(**{name: low}), name) == low
    assert getattr(_parse(**{name: high}), name) == high
    for bad in (low - 1, high + 1, "5", 1.5, True, None):
        with pytest.raises(BadRequest, match=name):
            _parse(**{name: bad})


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ({"url": 5}, "url"),
        ({"url": ""}, "url"),
        ({"url": "127.0.0.1:9/x"}, "absolute"),
        ({"url": "file:///etc/passwd"}, "absolute"),
        ({"url": "http://127.0.0.1:65536/"}, "port from 1 to 65535"),
        ({"url": "http://127.0.0.1:0/"}, "port from 1 to 65535"),
        ({"url": "http://127.0.0.1/a b"}, "printable ASCII"),
        ({"url": "http://h\u00e9/"}, "printable ASCII"),
        ({"url": "http://[::1]/"}, "host name"),
        ({"url": "http://user@h/"}, "host name"),
        ({"url": "http://h/" + "x" * 3000}, "longer"),
        ({"url": "http://h/", "extra": 1}, "unknown field"),
        ({"url": "http://h/", "headers": []}, "headers"),
        ({"url": "http://h/", "headers": {"Content-Length": "1"}}, "Content-Length"),
        ({"url": "http://h/", "headers": {"bad name": "1"}}, "bad name"),
        ({"url": "http://h/", "headers": {"X": "a\nb"}}, "control"),
        ({"url": "http://h/", "headers": {"X": "\u00e9"}}, "printable ASCII"),
        ({"url": "http://h/", "headers": {"host": "x"}}, "host"),
        ({"url": "http://h/", "headers": {f"H{i}": "v" for i in range(17)}}, "at most 16"),
        ({"url": "http://h/", "initialPosition": "Middle"}, "initialPosition"),
        ("http://h/", "JSON object"),
    ],
)
def test_bad_settings_name_the_field(value: Any, needle: str) -> None:
    with pytest.raises(BadRequest, match=needle):
        parse_webhook(value)


def test_allow_list() -> None:
    assert host_allowed("http://anything:1/", ())
    allowed = ("127.0.0.1", "hooks.example:8443")
    assert host_allowed("http://127.0.0.1:9000/x", allowed)
    assert host_allowed("https://HOOKS.example:8443/x", allowed)
    assert not host_allowed("https://hooks.example/x", allowed)  # other port
    assert not host_allowed("http://169.254.169.254/latest", allowed)
    with pytest.raises(BadRequest, match="allow-list"):
        parse_webhook({"url": "http://10.0.0.1/"}, allowed)
    assert parse_webhook({"url": "http://127.0.0.1/"}, allowed).url == "http://127.0.0.1/"


async def test_a_stored_webhook_outside_a_tightened_allow_list_does_not_start() -> None:
    """The allow-list is applied again whenever a pusher starts, not only when the
    webhook was stored: a gateway restarted with a narrower list refuses old ones."""
    from types import SimpleNamespace

    from gateway.api.webhooks import Webhooks

    loads: list[object] = []

    async def topic(*args: object, **kwargs: object) -> None:
        loads.append(args)

    async def members() -> list[str]:
        return []

    webhooks = Webhooks(
        SimpleNamespace(),  # type: ignore[arg-type]
        claim=None,  # type: ignore[arg-type]
        owned_topic=topic,  # type: ignore[arg-type]
        members=members,
        allowed_hosts=("127.0.0.1",),
    )
    key = ("persistent/public/default/t", "s")
    try:
        await webhooks._start(key, b'{"url": "http://10.0.0.1/hook"}', 5)
        assert "allow-list" in webhooks.errors[key] and key not in webhooks.running and not loads
        await webhooks._start(key, b'{"url": "http://127.0.0.1/hook"}', 6)
        assert loads  # allowed: it goes on to load the topic (the stub has none to give)
    finally:
        await webhooks.close()


async def test_a_pusher_whose_push_fails_unexpectedly_stops_for_a_restart() -> None:
    """A defect in one POST's handling must not leave a pusher that looks alive but never
    pushes again: it closes, and the reconciler (which restarts closed pushers) starts anew."""
    import asyncio
    from types import SimpleNamespace

    from gateway.api.webhooks import WebhookPusher

    topic = SimpleNamespace(name="persistent://public/default/t", partition=-1)
    pusher = WebhookPusher(topic, "s", parse_webhook({"url": "http://h/"}), None, 1)  # type: ignore[arg-type]

    async def broken(_batch: object) -> None:
        raise RuntimeError("boom")

    pusher._push = broken  # type: ignore[method-assign]
    worker = asyncio.get_running_loop().create_task(pusher._work())
    pusher.deliver([SimpleNamespace(content=SimpleNamespace(payload=b"x"))])  # type: ignore[list-item]
    await asyncio.wait_for(worker, 5)  # returns: the pusher closed itself
    assert pusher.closed and pusher.state == "stopped"
    assert pusher.last_error == "internal error: RuntimeError('boom')"


def test_dead_letter_topic_is_a_plain_topic_of_the_namespace() -> None:
    assert _parse().deadLetterTopic is None and _parse(deadLetterTopic=None).deadLetterTopic is None
    for good in ("letters", "orders-DLQ", "a.b=c:d_e", "_x", "x" * 255):
        config = _parse(deadLetterTopic=good)
        assert config.deadLetterTopic == good and parse_webhook(config.to_json()) == config
    bad: list[Any] = [
        "", "x" * 256, "a/b", "persistent://public/default/x", "-x", "x-partition-1", "partitioned",
        "abc\n", "caf\u00e9", 5, ["x"],
    ]  # fmt: skip
    for value in bad:
        with pytest.raises(BadRequest, match="deadLetterTopic"):
            _parse(deadLetterTopic=value)
    assert _parse(deadLetterTopic="partitioned2").deadLetterTopic == "partitioned2"  # only the word itself
