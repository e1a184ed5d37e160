"""An idle ledger writer costs nothing per tick, and still times what it sends next.

A gateway keeps one open ledger writer per loaded topic; a writer that woke on a
fixed timer while idle made every gateway's work per second grow with its topic
count (thousands of topics: thousands of wake-ups a second, until forwards
between gateways timed out). Real etcd and storage nodes: an idle writer's
background task must not look at its core on a timer, and after a long idle
spell an append is confirmed without a false stall, while a member paused then
is still replaced after the add timeout (the timer arms again on the append).
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from ledger_check import make_payload

from storage.client import LedgerClient, WriterConfig

pytestmark = pytest.mark.component

ADD_TIMEOUT_MS = 400
IDLE_S = 1.5  # several add timeouts, and 7 ticks of the 200 ms timer an idle writer used to run


async def test_an_idle_writer_sleeps_and_wakes_on_the_next_append(ledger_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = await ledger_cluster(4)
    config = WriterConfig(add_timeout_ms=ADD_TIMEOUT_MS)
    client = LedgerClient(await cluster.store(), seed=7, writer_config=config)
    writer = await client.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
    assert await writer.append(make_payload(0)) == 0

    core = writer._core
    ticks = 0
    on_timer = core.on_timer

    def counting(now_ms: int):  # type: ignore[no-untyped-def]
        nonlocal ticks
        ticks += 1
        return on_timer(now_ms)

    core.on_timer = counting  # type: ignore[method-assign]
    await asyncio.sleep(0.3)  # the last acks land and the progress check runs out
    ticks = 0
    await asyncio.sleep(IDLE_S)
    print(f"idle writer: {ticks} timer wake-ups in {IDLE_S} s")
    assert ticks == 0

    # after the idle spell (longer than the add timeout) appends confirm, no member counted stalled
    assert await asyncio.gather(*[writer.append_nowait(make_payload(n)) for n in range(1, 11)]) == list(
        range(1, 11)
    )
    assert writer.ensemble_changes == 0

    # idle again, then a member is paused: the next appends arm the add timeout and it is replaced
    await asyncio.sleep(IDLE_S)
    paused = cluster.node(writer.metadata.last_ensemble[0])
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        futures = [writer.append_nowait(make_payload(n)) for n in range(11, 21)]
        assert await asyncio.wait_for(asyncio.gather(*futures), 30) == list(range(11, 21))
        deadline = asyncio.get_running_loop().time() + 30
        while writer.ensemble_changes == 0:  # no further appends: only the timer can notice
            assert asyncio.get_running_loop().time() < deadline, "paused member never replaced"
            await asyncio.sleep(0.05)
        assert paused.address not in writer.metadata.last_ensemble
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    await client.close()
