"""Opening WebSocket v2 consumer and reader sessions on the topic's owner (docs/compatibility.md §1.6-1.7).

Owns: the set-up of a ``ConsumerSession`` (ws_consumer.py): subscribing with
the client's parameters (type, initial position, dead-letter topic, retries)
or creating a reader at its start position - inside a batch entry the
messages before the start are skipped -, refusing the handshake with the
error's status when that fails, and answering it only once the session is
registered (``accept_and_run``: a client that already left leaves nothing
behind).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from starlette.websockets import WebSocket

from gateway.api.ws_consumer import ConsumerSession
from gateway.api.ws_session import accept_and_run, deny
from gateway.broker.dispatch import ConsumerInfo
from gateway.broker.topic import Topic
from gateway.protocol.params import ConsumerParams, ReaderParams
from gateway.security.middleware import MAY_RETRY
from storage.formats.positions import EARLIEST, LATEST, Position

if TYPE_CHECKING:
    from gateway.process import Gateway


async def serve_consumer(
    gateway: Gateway, websocket: WebSocket, topic: Topic, subscription: str, params: ConsumerParams
) -> None:
    session = ConsumerSession(gateway, websocket, topic, params.batch_delivery, params.notices)
    name = params.consumer_name or f"consumer-{secrets.token_hex(4)}"
    try:
        dlq = params.dead_letter_topic
        sub, consumer_id = await topic.subscribe(
            subscription,
            params.subscription_type,
            params.to_consumer_info(name),
            session,
            initial=params.initial_position,
            durable=params.subscription_mode == "Durable",
            dead_letter_topic=dlq,
        )
    except Exception as exc:
        await session.out.finish()
        await deny(websocket, exc, "Failed to subscribe: ")
        return
    session.sub, session.consumer_id = sub, consumer_id
    session.max_retries = params.max_redeliver_count
    session.may_retry = websocket.scope.get(MAY_RETRY, True)

    async def undo() -> None:
        sub.remove_consumer(consumer_id)
        await session.out.finish()

    await accept_and_run(gateway, session.out, session.run, undo)


async def serve_reader(gateway: Gateway, websocket: WebSocket, topic: Topic, params: ReaderParams) -> None:
    session = ConsumerSession(gateway, websocket, topic, params.batch_delivery)
    session.reader = True
    start = params.start
    skip_in_batch = 0
    if start == "earliest":
        position, inclusive = EARLIEST, True
    elif start == "latest":
        position, inclusive = LATEST, True
    else:
        position, inclusive = Position(start.ledger_id, start.entry_id), params.start_inclusive
        if start.is_batch:  # inside a batch entry: read the entry, skip the messages before the start
            skip_in_batch, inclusive = start.batch_index + (0 if inclusive else 1), True
    info = ConsumerInfo(params.reader_name or f"reader-{secrets.token_hex(4)}", 0, params.receiver_queue_size)
    try:
        sub, consumer_id = topic.create_reader(position, inclusive, info, session, params.reader_name)
    except Exception as exc:
        await session.out.finish()
        await deny(websocket, exc, "Failed to create reader: ")
        return
    session.sub, session.consumer_id = sub, consumer_id
    sub.cursor.ack_batch_prefix(position, skip_in_batch)
    sub.start()

    async def undo() -> None:
        sub.remove_consumer(consumer_id)
        await topic.remove_reader(sub)
        await session.out.finish()

    await accept_and_run(gateway, session.out, session.run, undo)
