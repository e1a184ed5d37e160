"""WebSocket v2 producer endpoint (docs/compatibility.md §1.5), served by the topic's owner.

Owns: one producer session: handshake checks, sequence ids, publish frames in,
replies out. Rules: replies carry the request's ``context`` and come in
completion order (in order per entry); a frame that fails to parse (or whose
payload does not fit its schema) gets a ``send-error:N`` reply and the session
stays open; a message the topic fails (storage, quota, moved, terminated) gets
its ``send-error:N`` and then ends the session with 4503, and nothing read on
the session after that failure is published: frames the client pipelined
before it read the error can never be stored ahead of its resend of the failed
message (docs/compatibility.md §1.5.3, as a Pulsar producer is closed after a
failed send); a per-message ``sequenceId``
is honoured (else the topic assigns the producer's next one:
``Topic.publish_requests``), so retries can be deduplicated;
a repeat dedup dropped is answered as Pulsar does (ok, id -1:-1), with
``"duplicate": true`` only for ``markDuplicates=true`` (``publish_reply``); at
most ``PENDING_MAX`` messages (and ``pending_bytes_per_session`` bytes) are
in flight per session - beyond that the socket is simply not read (TCP
backpressure) until replies drain; a topic that moves closes the session with
4503 so the client reconnects (to any gateway).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket

from gateway.api.errors import close_code
from gateway.api.metrics import publish_latency
from gateway.api.ws_session import Outbound, accept_and_run, deny, read_frames
from gateway.broker.publish_results import Outcome, PublishResult
from gateway.broker.topic import Topic
from gateway.meta.schema_registry import SchemaNotFound
from gateway.meta.schema_types import SchemaInfo, SchemaMismatch, check_bytes
from gateway.protocol.errors import WS_PAYLOAD_ENCODING_ERROR, WS_UNKNOWN_ERROR, ProtocolError
from gateway.protocol.params import ProducerParams
from gateway.protocol.ws_frames import (
    PublishRequest,
    encode_frame,
    parse_publish,
    publish_batch_reply,
    publish_error,
    publish_error_dict,
    publish_ok_dict,
)

if TYPE_CHECKING:
    from gateway.process import Gateway

PENDING_MAX = 10_000


def publish_reply(outcome: Outcome, request: PublishRequest, mark_duplicates: bool) -> dict[str, Any]:
    """The reply to one published message. A repeat dedup dropped is answered as Pulsar
    answers it (ok, id -1:-1); ``"duplicate": true`` only with ``markDuplicates=true``."""
    context = request.context
    if isinstance(outcome, PublishResult):
        duplicate = outcome.duplicate and mark_duplicates
        return publish_ok_dict(outcome.b64, context, duplicate, request.schema_version or 0)
    retriable = bool(getattr(outcome, "retriable", False))
    return publish_error_dict(WS_UNKNOWN_ERROR, str(outcome) or "send failed", context, retriable)


class ProducerSession:
    def __init__(self, gateway: Gateway, websocket: WebSocket, topic: Topic, params: ProducerParams) -> None:
        self.gateway = gateway
        self.topic = topic
        self.params = params
        self.out = Outbound(websocket)
        self.websocket = websocket
        self.record = topic.add_producer(params.producer_name, params.initial_sequence_id)
        self.record.closer = self._closed_by_topic
        self.name = self.record.name
        self.pending = 0
        self.pending_bytes = 0
        self.room = asyncio.Event()
        self.room.set()
        self.latency = publish_latency(gateway).websocket  # observed once per frame
        self.schemas: dict[int, SchemaInfo | None] = {}  # versions frames named (None: no such version)
        self.ready = asyncio.Event()
        self.ready.set()

    def _closed_by_topic(self, code: str, reason: str) -> None:
        self.out.close(close_code(503), reason)

    def _check_sent(self, outcomes: list[Outcome]) -> None:
        """End the session at the first failed message (see the module's rules)."""
        for outcome in outcomes:
            if not isinstance(outcome, PublishResult):
                reason = f"send failed; reconnect and resend from the first failed message: {outcome}"
                self.out.close(close_code(503), reason)
                return

    def _publish(self, requests: list[PublishRequest], reply: Callable[[list[Outcome]], None]) -> None:
        """Hand ``requests`` to the topic; ``reply(outcomes)`` runs as soon as all are
        settled (synchronously, from the entry's completion: no loop round). A session
        already closed publishes nothing: its replies could not reach the client."""
        if self.out.closed:
            return
        count = len(requests)
        size = len(requests[0].payload) if count == 1 else sum(len(r.payload) for r in requests)
        self.pending += count
        self.pending_bytes += size
        limit_bytes = self.gateway.config.pending_bytes_per_session
        if self.pending >= PENDING_MAX or self.pending_bytes >= limit_bytes:
            self.room.clear()

        def settled(outcomes: list[Outcome]) -> None:
            self.pending -= count
            self.pending_bytes -= size
            if self.pending < PENDING_MAX and self.pending_bytes < limit_bytes:
                self.room.set()
            reply(outcomes)
            self._check_sent(outcomes)

        self.topic.publish_requests_then(self.record, requests, self.gateway.clock.now_ms(), settled)

    def _reply(self, outcome: Outcome, request: PublishRequest) -> dict[str, Any]:
        return publish_reply(outcome, request, self.params.mark_duplicates)

    def on_frame(self, data: str) -> None:
        started = perf_counter()
        try:
            parsed = parse_publish(data, self.gateway.clock.now_ms(), self.gateway.config.max_message_bytes)
        except ProtocolError as exc:
            self.out.send(publish_error(exc.ws_code, exc.message, exc.context))
            return
        if isinstance(parsed, PublishRequest):  # one message per frame (Pulsar's clients)
            request = parsed
            if request.schema_version is not None and not self._schemas_fit(data, [request], request.context):
                return

            def reply_one(outcomes: list[Outcome]) -> None:
                self.out.send(encode_frame(self._reply(outcomes[0], request)))
                self.latency.observe(perf_counter() - started)

            self._publish([request], reply_one)
            return
        batch = parsed
        named = any(r.schema_version is not None for r in batch)
        if named and not self._schemas_fit(data, batch, batch.context):  # the frame's own context
            return

        def reply_batch(outcomes: list[Outcome]) -> None:
            results = [self._reply(o, r) for o, r in zip(outcomes, batch, strict=True)]
            self.out.send(publish_batch_reply(results, batch.context))
            self.latency.observe(perf_counter() - started)

        self._publish(batch, reply_batch)

    def _schemas_fit(self, data: str, requests: list[PublishRequest], context: str | None) -> bool:
        """Whether every payload fits the schema version it names (else one ``send-error:7``
        reply). A version not yet known here is fetched first: the frame waits, and no
        later frame is read before it (publish order is kept)."""
        missing = {v for r in requests if (v := r.schema_version) is not None and v not in self.schemas}
        if missing:
            self.ready.clear()
            asyncio.get_running_loop().create_task(self._fetch_then(data, missing))
            return False
        for index, request in enumerate(requests):
            version = request.schema_version
            if version is None:
                continue
            info = self.schemas[version]
            where = "payload" if len(requests) == 1 else f"messages[{index}].payload"
            if info is None:
                message = f"schemaVersion {version}: the topic's schema has no such version"
                self.out.send(publish_error(WS_PAYLOAD_ENCODING_ERROR, message, context))
                return False
            try:
                check_bytes(info, request.payload, where)
            except SchemaMismatch as exc:
                self.out.send(publish_error(WS_PAYLOAD_ENCODING_ERROR, str(exc), context))
                return False
        return True

    async def _fetch_then(self, data: str, versions: set[int]) -> None:
        try:
            registry = self.gateway.schemas
            for version in versions:
                try:
                    self.schemas[version] = (await registry.version(self.topic.name, version)).info
                except SchemaNotFound:
                    self.schemas[version] = None
            self.on_frame(data)
        except Exception as exc:  # etcd unavailable: the frame fails, the session goes on
            failed = f"schema lookup failed: {exc}"
            self.out.send(publish_error(WS_UNKNOWN_ERROR, failed, None, retriable=True))
        finally:
            self.ready.set()

    async def run(self) -> None:
        try:
            await read_frames(self.out, self.on_frame, self.ready, self.room)
        except Exception:  # a defect: the client must not take it for a normal close
            self.out.close(close_code(500), "internal error")
            raise  # logged by ws_fastpath
        finally:
            if self.topic.producers.get(self.name) is self.record:
                self.topic.remove_producer(self.name)
            await self.out.finish()


async def serve_producer(
    gateway: Gateway, websocket: WebSocket, topic: Topic, params: ProducerParams
) -> None:
    try:
        session = ProducerSession(gateway, websocket, topic, params)
    except Exception as exc:
        await deny(websocket, exc, "Failed to create producer: ")
        return

    async def undo() -> None:
        if topic.producers.get(session.name) is session.record:
            topic.remove_producer(session.name)

    await accept_and_run(gateway, session.out, session.run, undo)
