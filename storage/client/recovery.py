"""Open-with-recovery: the asyncio shell around ``recovery_core``.

Owns: one recovery run: the IN_RECOVERY CAS, carrying out the core's fence /
read / recovery-add effects over the node connections, and the closing CAS.
Rules (docs/compatibility.md §6.4): mark IN_RECOVERY first (an OPEN ledger's writer
then can no longer change its ensemble); a ledger already CLOSED needs no
recovery; an IN_RECOVERY one is recovered again (a previous recoverer may
have died); the close converges: if another recoverer closed it first, its
value is final and is what this call returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from storage import wire
from storage.client.connection import ReplyCallback
from storage.client.metadata import LedgerMetadataStore
from storage.client.pool import ConnectionPool
from storage.client.recovery_core import (
    READ_WINDOW,
    CloseLedger,
    RecoveryCore,
    RecoveryEffect,
    RecoveryFailed,
    SendFence,
    SendRead,
    SendRecoveryAdd,
    close_recovered,
)
from storage.errors import NodeUnavailable, ProtocolViolation, Status
from storage.types import LedgerMetadata, LedgerState, NodeId

log = logging.getLogger(__name__)

RECOVERY_TIMEOUT_MS = 60_000  # a recovery with no decision by then fails (retriable)
REQUEST_TIMEOUT_MS = 5_000  # a fence/read/add a node has not answered by then counts as failed


def mark_in_recovery(current: LedgerMetadata) -> LedgerMetadata | None:
    if current.state is LedgerState.OPEN:
        return current.with_changes(state=LedgerState.IN_RECOVERY)
    return None  # already IN_RECOVERY (recover again) or CLOSED (nothing to do)


async def recover_ledger(
    metadata_store: LedgerMetadataStore,
    pool: ConnectionPool,
    ledger_id: int,
    read_window: int = READ_WINDOW,
    timeout_ms: int = RECOVERY_TIMEOUT_MS,
    request_timeout_ms: int = REQUEST_TIMEOUT_MS,
) -> LedgerMetadata:
    """Fence, recover and close ``ledger_id``; returns the CLOSED metadata."""
    metadata = await metadata_store.update(ledger_id, mark_in_recovery)
    if metadata.state is LedgerState.CLOSED:
        return metadata
    core = RecoveryCore(metadata, read_window=read_window)
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[CloseLedger] = loop.create_future()
    ledger_body = wire.ledger_body(ledger_id)

    def on_fence(node: NodeId, token: object, status: Status, body: bytes) -> None:
        lac = -1
        if status is Status.OK and len(body) == 16:
            with contextlib.suppress(ProtocolViolation):
                lac, _ = wire.parse_lac_reply(body)
        run(core.on_fence_response(node, status, lac))

    def on_read(node: NodeId, entry_id: int, status: Status, body: bytes) -> None:
        run(core.on_read_response(node, entry_id, status, body))

    def on_add(node: NodeId, entry_id: int, status: Status, body: bytes) -> None:
        run(core.on_recovery_add_response(node, entry_id, status))

    def send(node: NodeId, op: int, body: bytes, handler: ReplyCallback, token: Any) -> None:
        """Send with a deadline: a silent node (e.g. SIGSTOPped) answers TIMEOUT."""
        timer: asyncio.TimerHandle | None = None

        def on_reply(n: NodeId, t: Any, status: Status, data: bytes) -> None:
            nonlocal timer
            if timer is None:
                return  # already reported as timed out
            timer.cancel()
            timer = None
            handler(n, t, status, data)

        def on_timeout() -> None:
            nonlocal timer
            timer = None
            handler(node, token, Status.TIMEOUT, b"")

        timer = loop.call_later(request_timeout_ms / 1000, on_timeout)
        pool.get(node).send(op, body, on_reply, token)

    def run(effects: list[RecoveryEffect]) -> None:
        for effect in effects:
            if isinstance(effect, SendRead):
                body = wire.ledger_entry_body(ledger_id, effect.entry_id)
                send(effect.node, wire.Op.READ, body, on_read, effect.entry_id)
            elif isinstance(effect, SendRecoveryAdd):
                send(effect.node, wire.Op.ADD, effect.body, on_add, effect.entry_id)
            elif isinstance(effect, SendFence):
                send(effect.node, wire.Op.FENCE, ledger_body, on_fence, None)
            elif isinstance(effect, CloseLedger):
                if not outcome.done():
                    outcome.set_result(effect)
            elif isinstance(effect, RecoveryFailed) and not outcome.done():
                outcome.set_exception(effect.error)

    run(core.start())
    try:
        close = await asyncio.wait_for(outcome, timeout_ms / 1000)
    except TimeoutError as exc:
        raise NodeUnavailable(f"recovery of ledger {ledger_id} made no decision in {timeout_ms} ms") from exc
    closed = await metadata_store.update(
        ledger_id, lambda cur: close_recovered(cur, close.last_entry_id, close.length)
    )
    if closed.last_entry_id != close.last_entry_id:
        log.warning(
            "ledger %d: another recoverer closed it at %d (this one found %d); its value is final",
            ledger_id,
            closed.last_entry_id,
            close.last_entry_id,
        )
    log.info(
        "ledger %d recovered: from entry %d, %d entries written back, closed at %d",
        ledger_id,
        core.start_entry_id,
        core.recovered_entries,
        closed.last_entry_id,
    )
    return closed
