"""WebSocket v2 consumer and reader endpoints (docs/compatibility.md §1.6-1.7), served by the owner.

Owns: one consumer (or reader) session: it is the subscription's sink for
this consumer (deliveries become JSON frames) and turns client commands into
acks, cumulative acks, nacks, permits, seeks and unsubscribe. Rules:
- push mode: the dispatcher keeps at most ``receiverQueueSize`` unacked
  messages at this consumer (credit is released by ack, nack and redelivery -
  pulsar #2731 fixed); pull mode: only explicit ``permit`` frames give credit;
- any frame without a known ``type`` is an ack (Pulsar); a frame that cannot
  be parsed closes the session with 4003 (Pulsar's code 3, in the valid range);
- ids of another topic or never delivered move nothing;
- Folio extras: ``ackCumulative`` (Exclusive/Failover), ``seek`` by id or
  time, batched delivery (``batchDelivery=true``), batched acks and the
  Failover ``active`` / Key_Shared ``ranges`` notices (``notices=true``) -
  each only when the client asks, so Pulsar's own clients see Pulsar's frames;
- acks of frames already waiting in a row are applied together (once the
  server has no more received frames queued, or before any other command),
  so a burst of one-ack frames costs one dispatch;
- a reader is an Exclusive non-durable cursor; its frames only release credit;
- the session reports what it holds unsent to the gateway's delivery budget
  after every delivery (delivery_budget.py): over its bytes limit its
  deliveries pause, far over it or when the gateway's budget is full it is
  closed as a slow consumer (4429);
- once ``FRAMES_AHEAD_BYTES`` wait unsent, later deliveries wait unframed
  (a delivery is ~70 bytes, its frame ~1.4 x its payload): the budget's poll
  frames them (``refill``) as the socket drains, in order. A dispatch round
  hands each of 1,000 consumers of a hot topic its share before the budget
  can pause them; framed at once, that round alone took 200 MiB.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any, cast

import orjson
from starlette.websockets import WebSocket

from gateway.api.errors import close_code, protocol_close_code
from gateway.api.wire_mapping import encoded_delivery_frames, position_of
from gateway.api.ws_session import Outbound, read_frames
from gateway.broker import dead_letters, topic_admin
from gateway.broker.dispatch.base import Deliver, HashRange
from gateway.broker.subscription import Subscription
from gateway.broker.topic import Topic
from gateway.errors import GatewayError
from gateway.protocol.errors import WS_FAILED_TO_DESERIALIZE, ProtocolError
from gateway.protocol.ws_commands import (
    Ack,
    AckCumulative,
    IsEndOfTopic,
    Nack,
    Permit,
    ReconsumeLater,
    Seek,
    Unsubscribe,
    parse_command,
    plain_ack_id,
)
from gateway.protocol.ws_frames import (
    active_notice,
    end_of_topic_reply,
    messages_frame,
    ranges_notice,
)
from storage.formats.positions import EARLIEST, LATEST, NO_BATCH, MessagePosition, Position

if TYPE_CHECKING:
    from gateway.process import Gateway

FRAMES_AHEAD_BYTES = 64 * 1024  # past this much unsent, deliveries wait unframed (``backlog``)
FRAME_OVERHEAD = 160  # a delivery frame's fields beside its base64 payload, about
DELIVERED_IDS_MAX = 4096  # ids kept per session for the fast ack path (~120 bytes each)


def _framed_size(deliveries: list[Deliver]) -> int:
    """About what ``deliveries`` take as frames: base64 payloads plus the frame's fields."""
    return sum([len(d.content.payload) for d in deliveries]) * 4 // 3 + FRAME_OVERHEAD * len(deliveries)


class ConsumerSession:
    """A connected consumer: the subscription's sink and the client's commands."""

    def __init__(
        self,
        gateway: Gateway,
        websocket: WebSocket,
        topic: Topic,
        batch_delivery: bool,
        notices: bool = False,
    ) -> None:
        self.gateway = gateway
        self.websocket = websocket
        self.topic = topic
        self.partition = topic.partition
        self.batch_delivery = batch_delivery
        self.notices = notices  # Folio notice frames only when asked for (Pulsar sends none)
        self.out = Outbound(websocket)
        self.sub: Subscription | None = None
        self.consumer_id = 0
        self.reader = False
        self.delivered: dict[str, MessagePosition] = {}  # id as sent -> position, until acked
        self.acking = False  # the client acked something: its ids are worth keeping
        self.backlog: deque[list[Deliver]] = deque()  # deliveries not framed yet (socket backed up)
        self.backlog_bytes = 0  # their frames' size, estimated (``_framed_size``)
        self.acks: list[MessagePosition] = []  # fast acks of frames read in a row, not applied yet
        self.max_retries = 0  # maxRedeliverCount: reconsumeLater beyond it goes to the DLQ
        self.may_retry = True  # the caller may produce to the retry topic (security layer)

    # ConsumerSink ---------------------------------------------------------

    def deliver(self, deliveries: list[Deliver]) -> None:
        if self.backlog:  # in order: behind what waits unframed
            self.backlog.append(deliveries)
            self.backlog_bytes += _framed_size(deliveries)
            self.refill()
        else:
            rest = self._send_some(deliveries)
            if rest:
                self.backlog.append(rest)  # framed once the socket takes what waits
                self.backlog_bytes += _framed_size(rest)
        self.gateway.deliveries.sent(self)

    def _send_some(self, deliveries: list[Deliver]) -> list[Deliver]:
        """Frame and send ``deliveries`` from the first, a slice at a time, while fewer than
        ``FRAMES_AHEAD_BYTES`` wait unsent (the socket takes each slice at once if it can);
        the rest (in order) are returned."""
        out = self.out
        done, count = 0, len(deliveries)
        while done < count and not out.closed:
            room = FRAMES_AHEAD_BYTES - out.pending_bytes()
            if room <= 0:
                break
            end = done
            while end < count and room > 0:
                room -= len(deliveries[end].content.payload) * 4 // 3 + FRAME_OVERHEAD
                end += 1
            self._send_frames(deliveries if done == 0 and end == count else deliveries[done:end])
            done = end
        return deliveries[done:] if done < count else []

    def _send_frames(self, deliveries: list[Deliver]) -> None:
        ids, frames = encoded_delivery_frames(deliveries, self.partition)
        delivered = self.delivered
        if self.acking:  # a client that never acked keeps no ids: 1,000 of them would pin 120 MB
            if len(delivered) > DELIVERED_IDS_MAX:  # acks of forgotten ids parse them
                delivered.clear()
            delivered.update(zip(ids, [d.message.position for d in deliveries], strict=True))
        if self.batch_delivery:
            self.out.send(messages_frame(frames))
            self.out.flush()
        else:
            self.out.send_burst(frames)

    # Throttled (the gateway's delivery budget) ------------------------------

    def pending_bytes(self) -> int:
        return self.out.pending_bytes() + self.backlog_bytes

    def refill(self) -> None:
        """Frame deliveries of the backlog while the socket holds less than
        ``FRAMES_AHEAD_BYTES`` (in order, ahead of any later delivery)."""
        backlog = self.backlog
        while backlog and not self.out.closed and self.out.pending_bytes() < FRAMES_AHEAD_BYTES:
            deliveries = backlog.popleft()
            self.backlog_bytes -= _framed_size(deliveries)
            rest = self._send_some(deliveries)
            if rest:
                backlog.appendleft(rest)
                self.backlog_bytes += _framed_size(rest)

    def set_paused(self, paused: bool) -> None:
        if self.sub is not None:
            self.sub.set_writable(self.consumer_id, not paused)

    def close_slow(self, reason: str) -> None:
        self.backlog.clear()  # unacked: they go to it or to others again
        self.backlog_bytes = 0
        self.out.close_slow(reason)

    def active_changed(self, active: bool) -> None:
        if self.notices:
            self.out.send(active_notice(active))

    def ranges_changed(self, ranges: tuple[HashRange, ...]) -> None:
        if self.notices:
            self.out.send(ranges_notice(ranges))

    def close(self, code: str, reason: str) -> None:
        status = 404 if code == "subscription_deleted" else 503
        self.out.close(close_code(status), reason)

    # commands -------------------------------------------------------------

    def _fast_ack(self, data: str) -> bool:
        """Acks of ids this session delivered, without decoding them (Pulsar's proxy
        keeps the same id cache); anything else goes through ``parse_command``. The
        usual frame, one id as Pulsar's clients send it, is not even parsed."""
        message_id = plain_ack_id(data)
        if message_id is not None:
            self.acking = True
            position = self.delivered.pop(message_id, None)
            if position is None:
                return False
            self.acks.append(position)
            return True
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(obj, dict):
            return False
        kind = obj.get("type")
        ids: list[Any]
        if kind is None and len(obj) == 1:
            ids = [obj.get("messageId")]
        elif kind == "ack" and len(obj) == 2 and isinstance(obj.get("messageIds"), list):
            ids = obj["messageIds"]
        else:
            return False
        if not ids:
            return False
        self.acking = True
        pop = self.delivered.pop
        try:
            positions = [pop(i, None) for i in ids]  # keys are str: no other id is in
        except TypeError:  # an unhashable id (a list, an object)
            return False
        if None in positions:  # an id not delivered here (or given twice): ``parse_command`` acks
            return False  # them all by their text (those taken from the cache above included)
        self.acks += cast(list[MessagePosition], positions)  # no None: checked above
        return True

    def flush_acks(self) -> None:
        """Apply the acks gathered from a run of frames in one go (one dispatch)."""
        if self.acks:
            acks, self.acks = self.acks, []
            assert self.sub is not None
            self.sub.ack(self.consumer_id, acks)

    def on_frame(self, data: str) -> None:
        sub = self.sub
        assert sub is not None
        if self._fast_ack(data):
            if not self.out.received_waiting():
                self.flush_acks()
            return
        self.flush_acks()  # in order: acks before the command that follows them
        try:
            command = parse_command(data)
        except ProtocolError as exc:
            self.out.close(protocol_close_code(exc.ws_code), exc.message)
            return
        if isinstance(command, Ack):
            positions = [p for p in (position_of(i, self.partition) for i in command.message_ids) if p]
            sub.ack(self.consumer_id, positions)
        elif isinstance(command, AckCumulative):
            position = position_of(command.message_id, self.partition)
            if position is not None:
                try:
                    sub.ack_cumulative(self.consumer_id, position)
                except GatewayError as exc:
                    self.out.send(orjson.dumps({"type": "error", "code": exc.code, "errorMsg": str(exc)}))
        elif isinstance(command, Nack):
            positions = [p for p in (position_of(i, self.partition) for i in command.message_ids) if p]
            sub.nack(self.consumer_id, positions)
        elif isinstance(command, Permit):
            sub.permits(self.consumer_id, command.n)
        elif isinstance(command, IsEndOfTopic):
            self.out.send(end_of_topic_reply(self.topic.end_of_topic(sub)))
        elif isinstance(command, Unsubscribe):
            self._unsubscribe()
        elif isinstance(command, Seek):
            self._seek(command)
        elif isinstance(command, ReconsumeLater):
            position = position_of(command.message_id, self.partition)
            if position is not None and not self.reader and not self.may_retry:
                retry = dead_letters.letter_topics(self.topic.name, sub.name)[0]
                reason = f"not authorized to produce to the retry topic {retry}"
                self.out.send(orjson.dumps({"type": "error", "code": "forbidden", "errorMsg": reason}))
            elif position is not None and not self.reader:
                task = dead_letters.reconsume_later(
                    self.topic, sub, self.consumer_id, position, command.delay_ms, self.max_retries
                )
                asyncio.get_running_loop().create_task(task)

    def _unsubscribe(self) -> None:
        sub = self.sub
        assert sub is not None
        if self.reader:
            return
        others = [c for c in sub.consumers if c != self.consumer_id]
        if others:
            self.out.close(
                protocol_close_code(WS_FAILED_TO_DESERIALIZE),
                f"cannot unsubscribe: {len(others)} other consumers connected",
            )
            return
        sub.remove_consumer(self.consumer_id)
        asyncio.get_running_loop().create_task(self.topic.unsubscribe(sub.name, force=True))

    def _seek(self, command: Seek) -> None:
        sub = self.sub
        assert sub is not None
        if command.timestamp_ms is not None:
            timestamp = command.timestamp_ms

            async def by_time() -> None:
                position = await self.topic.first_position_at_or_after(timestamp)
                if position is None:
                    sub.seek(LATEST)
                else:
                    sub.seek(position, inclusive=True)

            asyncio.get_running_loop().create_task(by_time())
            return
        message_id = command.message_id
        if message_id is None:
            return
        if message_id.ledger_id < 0:
            sub.seek(EARLIEST)
        elif message_id.ledger_id >= 2**63 - 1:
            sub.seek(LATEST)
        else:  # at batch-index precision: a seek into a batch does not rewind to its start
            entry = Position(message_id.ledger_id, message_id.entry_id)
            index = message_id.batch_index if message_id.batch_size > 0 else NO_BATCH
            task = topic_admin.seek_to_message(self.topic, sub, entry, index, not command.inclusive)
            asyncio.get_running_loop().create_task(task)

    async def run(self) -> None:
        try:
            await read_frames(self.out, self.on_frame)
        except Exception:  # a defect: the client must not take it for a normal close
            self.out.close(close_code(500), "internal error")
            raise  # logged by ws_fastpath
        finally:
            sub = self.sub
            if sub is not None:
                self.flush_acks()
                sub.remove_consumer(self.consumer_id)
                if self.reader:
                    await self.topic.remove_reader(sub)
            await self.out.finish()
            self.gateway.deliveries.forget(self)
