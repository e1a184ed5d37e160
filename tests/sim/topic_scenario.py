"""Seeded scenarios of the gateway's topics and their ownership hand-over, on the
simulated storage: the real ``BrokerService``, ``Topic``, ``Subscription``, cursor
store and ``OwnershipManager`` over the real managed log, ledger client and storage
nodes.

Owns: one topic served by a succession of owners on two simulated gateways (``gA``,
``gB``: processes of the world, each with its own ``LedgerClient``, lease session,
gateway registration and bundle ownership on its own handle of the ``MemoryStore``),
a producer and the subscription's consumers (one for Exclusive, two for Failover,
Shared and Key_Shared: each seed draws the type) that follow the topic from owner
to owner, and the checks. What runs is production code: a gateway acquires the topic's
bundle by its lookup (create-if-absent of the ownership key under its lease; the
key's revision is the ownership epoch ``BrokerService`` loads under); loading the
topic opens its managed log under that epoch (fencing and recovering the previous
owner's ledgers) and restores its cursors and its dedup state (snapshot and log
tail); publishing goes through the batcher, dedup and the managed log; delivery
through the subscription's read loop and the type's dispatcher; acks through
the cursor, persisted to etcd by compare-and-swap (``cursor_store``); a lost
bundle drops the topics, an unload request closes them gracefully first.
Simulated around it (docs/testing.md §8): the clients' requests, which reach a
gateway's process after a seeded hop and are lost with it (a request to a killed
gateway times out), and etcd (the ``MemoryStore``, its leases on virtual time).
A hand-over is one of: ``kill`` (kill -9 of the owner; its lease runs out in etcd,
then the next owner acquires), ``unload`` (an unload request naming the next owner:
the owner closes the topic gracefully - drain, cursor and dedup snapshot, ledger
closed - releases the bundle, and the next owner takes up the assignment) or
``cut`` (the owner's handle on etcd fails: its lease session runs out locally, it
drops the topic, and the next owner acquires once etcd expired the lease) or
``assign`` (kill -9 of the owner, and the next owner does not look the topic up: the
elected load manager, ``LoadManager`` of gateway/ownership/load_manager.py in a
process of its own, ``gL``, sees the dead owner's registration and bundle key expire
and assigns the bundle to the live gateway, whose ``OwnershipManager`` takes the
assignment up). A gateway that lost its lease takes part again as a new process.
The storage faults are scenario.py's.
Clients: the producer publishes ``messages`` one-message publishes with sequence
ids 0, 1, ... and up to ``window`` in flight over one FIFO connection, Pulsar's
way: on any failure it waits for its requests in flight, reconnects to the owner
of the moment and sends every unconfirmed message again, in order; the consumer
acks every delivery after a seeded delay. At the end both gateways are killed, a
third takes the topic over with every node up, reads the log from its start, and
a consumer drains the subscription there.
Checks: every confirmed publish is in the log at the id it was confirmed with (a
duplicate answer: in the log), stored once per (producer, sequence id) with dedup
on, and a producer's messages in the log in sequence order; every confirmed
publish is delivered; within one consumer session deliveries come in log order
(Exclusive, Failover; per key for Key_Shared, none promised for Shared); with
Key_Shared no consumer receives a message while another live consumer of the same
owner holds an earlier message of its key unacknowledged; no delivery was
covered by the cursor the session's owner restored (acked and persisted before:
exactly once per the dedup rules and the persisted acks); the persisted cursor
never moves back and never covers a message the consumer did not ack.
Broken rules for the controls (docs/testing.md §6, here only, no production code
reads them): ``skip_recovery`` (each new owner marks the log's open ledgers CLOSED
at the LAC the nodes report before loading the topic), ``ack_ahead`` (the
subscription acks the whole log whenever the consumer acks one message),
``cursor_reset`` (a new owner throws the restored cursor away and starts the
subscription over from the earliest message), ``dedup`` off (the producer's
resends store messages twice), ``key_spread`` (a Key_Shared subscription served by
the Shared dispatcher), ``load_manager`` off (no load manager runs: an ``assign``
hand-over never ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from coordination import keys
from coordination.memory_store import MemoryStore
from coordination.session import LeaseSession
from gateway.broker.cursor_core import Cursor
from gateway.broker.dispatch import ConsumerInfo
from gateway.broker.dispatch.base import Deliver, HashRange
from gateway.broker.log_policy import Retention, RolloverPolicy
from gateway.broker.log_state import LogConfig
from gateway.broker.publish_results import PublishResult
from gateway.broker.service import BrokerService, NamespaceView
from gateway.broker.subscription import Subscription
from gateway.broker.topic import Topic
from gateway.broker.topic_policies import TopicPolicies
from gateway.names import NamespaceName, TopicName
from gateway.ownership.bundles import NamespaceBundle
from gateway.ownership.held_bundles import LossReason
from gateway.ownership.load_manager import LoadManager
from gateway.ownership.owner import OwnershipManager
from gateway.ownership.registry import GatewayRegistry
from gateway.subscription_type import SubscriptionType
from storage.formats.entry_format import EntryMessage, decode_entry
from storage.formats.log_record import decode_state
from storage.formats.positions import EARLIEST, NO_BATCH, MessagePosition, Position
from storage.types import LedgerState

from .scenario import SIM_TIME_MAX_S, Scenario, World, close_unrecovered, inject_faults, make_scenario
from .world import PROCESS, Process, Stalled, seeded

TOPIC = TopicName.parse("persistent://sim/ns/orders")
SUBSCRIPTION = "sub"
PRODUCER = "p"
REQUEST_TIMEOUT_S = 0.5
GATEWAY_LEASE_S = 2  # a killed owner's bundle is free again after this long
LOAD_ROUND_S = 0.2  # the load manager's round


class RequestFailed(Exception):
    """A request to a gateway that is down (refused) or that answered with an error."""


@dataclass(frozen=True, slots=True)
class TopicScenario:
    storage: Scenario
    messages: int
    window: int
    entries_per_ledger: int
    handover_ms: tuple[int, ...]  # when each hand-over happens, after the previous one
    kinds: tuple[str, ...]  # "kill", "unload", "cut" or "assign" per hand-over
    ack_delay_ms: tuple[int, int]
    dedup: bool = True
    skip_recovery: bool = False
    ack_ahead: bool = False
    cursor_reset: bool = False
    sub_type: SubscriptionType = SubscriptionType.EXCLUSIVE
    keys: int = 3  # each message's key is k<sequence id % keys>
    key_spread: bool = False
    load_manager: bool = True

    @property
    def consumers(self) -> int:
        """Consumers kept on the owner: one for Exclusive, two for the others."""
        return 1 if self.sub_type is SubscriptionType.EXCLUSIVE else 2

    def describe(self) -> str:
        return (
            f"SEED={self.storage.seed} messages={self.messages} window={self.window} "
            f"entries_per_ledger={self.entries_per_ledger} handover_ms={list(self.handover_ms)} "
            f"kinds={list(self.kinds)} ack_delay_ms={self.ack_delay_ms} "
            f"dedup={self.dedup} skip_recovery={self.skip_recovery} ack_ahead={self.ack_ahead} "
            f"cursor_reset={self.cursor_reset} sub_type={self.sub_type} keys={self.keys} "
            f"key_spread={self.key_spread} load_manager={self.load_manager} | " + self.storage.describe()
        )


def make_topic_scenario(
    seed: int,
    *,
    dedup: bool = True,
    skip_recovery: bool = False,
    ack_ahead: bool = False,
    cursor_reset: bool = False,
    sub_type: SubscriptionType | None = None,
    key_spread: bool = False,
    load_manager: bool = True,
) -> TopicScenario:
    """``sub_type`` None: drawn from the seed (its own stream, so the other draws of a
    seed stay what they were; so is whether a ``kill`` becomes an ``assign``)."""
    rng = seeded(seed, "topic-scenario")
    types = seeded(seed, "topic-subscription")
    assigns = seeded(seed, "topic-assign")
    storage = make_scenario(seed)
    storage = replace(storage, ensemble=3, nodes=max(storage.nodes, 3), writer_closes=False)
    handovers = rng.randint(1, 3)
    return TopicScenario(
        storage=storage,
        messages=rng.randint(12, 40),
        window=rng.choice((1, 4, 8)),
        entries_per_ledger=rng.choice((3, 6, 50)),
        handover_ms=tuple(rng.randint(20, 250) for _ in range(handovers)),
        kinds=tuple(
            "assign" if kind == "kill" and assigns.random() < 0.5 else kind
            for kind in (rng.choice(("kill", "unload", "cut")) for _ in range(handovers))
        ),
        ack_delay_ms=rng.choice(((1, 5), (5, 60), (20, 250))),
        dedup=dedup,
        skip_recovery=skip_recovery,
        ack_ahead=ack_ahead,
        cursor_reset=cursor_reset,
        sub_type=sub_type or types.choice(tuple(SubscriptionType)),
        keys=types.randint(1, 4),
        key_spread=key_spread,
        load_manager=load_manager,
    )


@dataclass(slots=True)
class TopicOutcome:
    scenario: TopicScenario
    violations: list[str]
    stats: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------- gateways


class SimGateway:
    """One gateway host: the real ``BrokerService`` (topics, subscriptions, cursors)
    over its own ``LedgerClient``, in a simulated process; a restart is a fresh one."""

    def __init__(self, run: TopicRun, name: str) -> None:
        self.run = run
        self.name = name
        self.process, self._make_client = run.world.client(name, f"client-{name}")
        self.service: BrokerService | None = None
        self.ownership: OwnershipManager | None = None
        self.etcd: MemoryStore | None = None
        self.gateway_id = ""

    def start(self) -> None:
        self.service = None
        self.ownership = None
        self.process.start(self._main)

    async def _main(self) -> None:
        s = self.run.s
        config = LogConfig(rollover=RolloverPolicy(entries_max=s.entries_per_ledger))
        policies = TopicPolicies(dedup=s.dedup, retention=Retention(minutes=-1, size_mb=-1))

        async def policy_source(_ns: NamespaceName) -> NamespaceView:
            return NamespaceView(True, policies=policies)

        world = self.run.world
        service = BrokerService(world.store, self._make_client(), world.clock, policy_source, config)
        etcd = self.etcd = world.memory.view()  # this process's own handle (it can be cut off)
        session = await LeaseSession(etcd, GATEWAY_LEASE_S, clock=world.clock).start()
        self.gateway_id = f"{self.name}.{self.process.incarnation}"
        url = f"http://{self.name}:8080"
        registry = GatewayRegistry(etcd, session, self.gateway_id, url, wall_clock=world.clock)
        ownership = OwnershipManager(etcd, session, registry)

        async def lost(bundle: NamespaceBundle, _reason: LossReason) -> None:
            await service.drop_where(bundle.contains)

        async def unload(bundle: NamespaceBundle) -> None:
            await service.unload_where(bundle.contains)

        ownership.on_bundle_lost(lost)
        ownership.on_unload_requested(unload)
        await ownership.start()
        service.is_local = ownership.is_owner
        service.ownership_epoch = ownership.epoch_of
        service.held_generation = ownership.held_generation
        service.lease_valid = ownership.lease_valid
        service.start()
        self.ownership = ownership
        self.service = service
        while True:
            await asyncio.sleep(1.0)

    @property
    def serving(self) -> bool:
        """Up, started, and its lease still held."""
        ownership = self.ownership
        return (
            self.process.up
            and self.service is not None
            and ownership is not None
            and (not ownership.session.lost.is_set())
        )

    async def acquire(self) -> bool:
        """Whether this gateway owns the topic now (acquiring its bundle if it is free)."""
        assert self.ownership is not None
        info = await self.ownership.lookup(TOPIC, authoritative=True)
        return info.is_self


class TopicRun:
    """The gateways, the clients and what the checks need, for one seed."""

    def __init__(self, world: World, s: TopicScenario) -> None:
        self.world = world
        self.s = s
        self.loop = world.loop
        self.gateways = [SimGateway(self, "gA"), SimGateway(self, "gB")]
        self.owner: SimGateway | None = None
        self.owners = 0  # owners so far
        self.assigned = 0  # hand-overs the load manager carried out ("assign")
        self.load_manager = Process(world.loop, "gL")
        self.client = Process(world.loop, "clients")
        self.rng = seeded(s.storage.seed, "clients")
        # producer
        self.confirmed: dict[int, MessagePosition | None] = {}  # sequence id -> id (None: duplicate)
        self.producing_done = False
        # consumer
        self.sessions: list[list[MessagePosition]] = []  # deliveries per consumer session
        self.restored: list[Cursor] = []  # the cursor each session's owner restored
        self.consumer_acked: set[MessagePosition] = set()
        self.session_at: dict[int, tuple[SimGateway, int]] = {}  # session -> gateway incarnation
        self.closed_sessions: set[int] = set()
        self.delivered_msgs: dict[MessagePosition, EntryMessage] = {}
        self.unacked: dict[int, dict[MessagePosition, bytes | None]] = {}  # session -> its held keys
        self.key_order: list[str] = []  # Key_Shared: a key held by two consumers at once
        # persisted cursors, in etcd revision order
        self.cursor_writes: list[tuple[int, Cursor]] = []
        self.read_back: list[tuple[MessagePosition, EntryMessage]] = []
        self._subs: dict[int, tuple[Subscription, int] | None] = {}  # session -> its consumer
        self.deadline_ms = 0  # the producer gives up what it could not publish by then
        self.last_failure = ""  # the producer's last failed request (for a report)

    # ------------------------------------------------------------ requests

    async def call(
        self,
        gateway: SimGateway,
        fn: Callable[[BrokerService], Coroutine[Any, Any, Any]],
        *,
        fifo: bool = False,
    ) -> Any:
        """Run ``fn(service)`` in ``gateway``'s process one seeded hop away and bring its
        answer back one hop later; lost with the gateway (a time-out). ``fifo``: on the
        producer's connection, where requests arrive in the order they were sent."""
        loop, client = self.loop, PROCESS.get()
        assert client is not None
        answer: asyncio.Future[Any] = loop.create_future()

        def reply(task: asyncio.Future[Any]) -> None:
            error = RequestFailed("cancelled") if task.cancelled() else task.exception()
            if answer.done():  # the client gave up waiting (the error is retrieved all the same)
                return
            if error is not None:
                answer.set_exception(RequestFailed(repr(error)))
            else:
                answer.set_result(task.result())

        def arrive() -> None:
            service = gateway.service
            if service is None:
                loop.call_later(self.hop(), reply, _failed("not serving yet"), context=client.context)
                return
            task: asyncio.Task[Any] = loop.create_task(fn(service))
            task.add_done_callback(lambda t: loop.call_later(self.hop(), reply, t, context=client.context))

        if not gateway.process.up:
            await asyncio.sleep(self.hop())
            raise RequestFailed(f"{gateway.name} refused the connection")
        at = loop.time() + self.hop()
        if fifo:
            at = self._fifo_at = max(at, self._fifo_at + 1e-6)
        loop.call_at(at, arrive, context=gateway.process.context)
        return await asyncio.wait_for(answer, REQUEST_TIMEOUT_S)

    _fifo_at = 0.0

    def hop(self) -> float:
        return self.rng.randint(1, 4) / 1000

    # ------------------------------------------------------------ ownership

    async def _take_over(self, gateway: SimGateway) -> None:
        """Make ``gateway`` the owner: its lookup acquires the topic's bundle once no
        one holds it (the previous owner released it, or its lease expired)."""
        if self.s.skip_recovery:
            await self._close_without_recovery(gateway)
        while True:
            await self._ready(gateway)  # lost its lease: it takes part again as a new process
            try:
                if await self.call(gateway, lambda _service: gateway.acquire()):
                    break
            except (RequestFailed, TimeoutError):
                pass
            await asyncio.sleep(0.05)
        self.owners += 1
        self.owner = gateway

    async def _close_without_recovery(self, gateway: SimGateway) -> None:
        """The control's broken rule: the log's open ledgers marked CLOSED at the LAC the
        nodes report, without fencing or recovery, before the new owner loads it."""
        kv = await self.world.store.get(keys.managed_log(TOPIC.path))
        if kv is None:
            return
        client = gateway._make_client()
        for info in decode_state(kv.value)[0]:
            with contextlib.suppress(Exception):
                reader = await client.open(info.ledger_id, recover=False)
                if reader.metadata.state is LedgerState.OPEN:
                    await client.metadata.update(
                        info.ledger_id, functools.partial(close_unrecovered, lac=reader.last_add_confirmed)
                    )

    async def hand_overs(self) -> None:
        s = self.s
        await self._take_over(self.gateways[0])
        for k, kind in enumerate(s.kinds):
            await asyncio.sleep(s.handover_ms[k] / 1000)
            old = self.owner
            assert old is not None
            new = self.gateways[1 - self.gateways.index(old)]
            await self._ready(new)
            if kind == "kill":
                old.process.kill()
            elif kind == "assign":
                old.process.kill()
                await self._assigned(new)
            elif kind == "unload" and old.serving:
                with contextlib.suppress(RequestFailed, TimeoutError):
                    await self.call(old, functools.partial(self._request_unload, old, new))
            elif kind == "cut" and old.etcd is not None:
                old.etcd.set_available(False)  # its lease runs out; it stops serving first
            await self._take_over(new)

    async def lead_loads(self) -> None:
        """The ``gL`` process: the load manager, elected first, and nothing else (it has
        no registration, so it is never given a bundle)."""
        etcd = self.world.memory.view()
        session = await LeaseSession(etcd, GATEWAY_LEASE_S, clock=self.world.clock).start()
        manager = LoadManager(etcd, session, "gL", interval_s=LOAD_ROUND_S, wall_clock=self.world.clock)
        await manager.start()
        while True:
            await asyncio.sleep(1.0)

    async def _assigned(self, gateway: SimGateway) -> None:
        """Wait until ``gateway`` owns the topic's bundle without asking for it: once the
        dead owner's lease expired, the load manager assigns the bundle to the one live
        gateway, which acquires it (or, if that gateway lost its lease meanwhile, it
        starts again and the assignment is decided afresh)."""
        while True:
            ownership = gateway.ownership
            if gateway.serving and ownership is not None and ownership.owned_bundle_of(TOPIC) is not None:
                self.assigned += 1
                return
            if not gateway.serving:
                await self._ready(gateway)
            await asyncio.sleep(0.01)

    @staticmethod
    async def _ready(gateway: SimGateway) -> None:
        """Start ``gateway`` afresh if it is down or lost its lease; wait until it serves."""
        if gateway.process.up and gateway.service is not None and not gateway.serving:
            gateway.process.kill()
        if not gateway.process.up:
            gateway.start()
        while not gateway.serving:
            await asyncio.sleep(0.01)

    @staticmethod
    async def _request_unload(old: SimGateway, new: SimGateway, _service: BrokerService) -> None:
        assert old.ownership is not None
        bundle = old.ownership.owned_bundle_of(TOPIC)
        if bundle is not None:
            await old.ownership.request_unload(bundle, to_gateway=new.gateway_id)

    # ------------------------------------------------------------ producer

    async def produce(self) -> None:
        s = self.s
        unconfirmed = list(range(s.messages))
        while unconfirmed and self.world.clock.now_ms() < self.deadline_ms:
            owner = self.owner
            if owner is None:
                await asyncio.sleep(0.02)
                continue
            try:  # connect: the topic is loaded there (a new owner recovers the log now)
                topic = await self.call(owner, lambda service: service.topic(TOPIC))
            except (RequestFailed, TimeoutError):
                await asyncio.sleep(0.02)
                continue
            failed = False
            inflight: set[asyncio.Task[bool]] = set()
            for seq in list(unconfirmed):
                while len(inflight) >= s.window:
                    done, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                    failed = failed or any(not t.result() for t in done)
                if failed:
                    break
                inflight.add(asyncio.get_running_loop().create_task(self._publish(owner, topic, seq)))
            if inflight:
                await asyncio.wait(inflight)
            unconfirmed = [seq for seq in unconfirmed if seq not in self.confirmed]
            if unconfirmed:
                await asyncio.sleep(0.02)  # reconnect, then send everything unconfirmed again
        self.producing_done = True

    async def _publish(self, owner: SimGateway, topic: Topic, seq: int) -> bool:
        message = EntryMessage(
            f"{PRODUCER}/{seq}".encode(), self.world.clock.now_ms(), PRODUCER, seq, key=_key(self.s, seq)
        )

        async def publish(_service: BrokerService) -> PublishResult:
            return await topic.publish(message)

        try:
            result = await self.call(owner, publish, fifo=True)
        except (RequestFailed, TimeoutError) as exc:
            self.last_failure = repr(exc)
            return False
        if seq not in self.confirmed:
            self.confirmed[seq] = (
                None
                if result.duplicate
                else MessagePosition(result.ledger_id, result.entry_id, result.batch_index)
            )
        return True

    # ------------------------------------------------------------ consumer

    async def consume(self, until: Callable[[], bool]) -> None:
        """Keep the scenario's consumer sessions on the owner of the moment until ``until()``."""
        while not until():
            owner = self.owner
            if owner is not None and len(self._live_sessions(owner)) < self.s.consumers:
                await self._subscribe(owner)
            await asyncio.sleep(0.01)

    def _live_sessions(self, owner: SimGateway) -> list[int]:
        at = (owner, owner.process.incarnation)
        if not owner.process.up:
            return []
        return [i for i, where in self.session_at.items() if where == at and i not in self.closed_sessions]

    async def _subscribe(self, owner: SimGateway) -> None:
        run = self

        index = -1

        class Sink:
            def deliver(self, deliveries: list[Deliver]) -> None:
                sub = run._subs.get(index)
                for d in deliveries:
                    run.on_delivery(index, d.position, d.content)
                    low, high = run.s.ack_delay_ms
                    delay = run.rng.randint(low, high) / 1000
                    if sub is not None:
                        run.loop.call_later(delay, run._ack, sub[0], sub[1], d.position, index)

            def active_changed(self, active: bool) -> None:
                pass

            def ranges_changed(self, ranges: tuple[HashRange, ...]) -> None:
                pass

            def close(self, code: str, reason: str) -> None:
                run.closed_sessions.add(index)

        async def subscribe(service: BrokerService) -> None:
            nonlocal index
            topic = await service.topic(TOPIC)
            index = len(run.sessions)
            existing = topic.subscriptions.get(SUBSCRIPTION)
            restored = (
                Cursor.restore(existing.cursor.snapshot())
                if existing is not None
                else Cursor(Position(-1, -1))
            )
            if run.s.cursor_reset and existing is not None and not existing.consumers:
                existing.seek(EARLIEST)  # the control's broken rule: the restored cursor thrown away
            run.sessions.append([])
            run.restored.append(restored)
            run.unacked[index] = {}
            run._subs[index] = None
            run.session_at[index] = (owner, owner.process.incarnation)
            sub_type = run.s.sub_type
            if run.s.key_spread and sub_type is SubscriptionType.KEY_SHARED:
                sub_type = SubscriptionType.SHARED  # the control's broken rule: keys spread over consumers
            name = f"c{len(run._live_sessions(owner)) - 1}"
            sub, consumer_id = await topic.subscribe(
                SUBSCRIPTION, sub_type, ConsumerInfo(name=name), Sink(), initial="Earliest"
            )
            if run.s.ack_ahead:
                _ack_ahead(sub, topic)
            run._subs[index] = (sub, consumer_id)

        try:
            await self.call(owner, subscribe)
        except (RequestFailed, TimeoutError):
            if index >= 0:
                self.closed_sessions.add(index)  # it may have subscribed before the answer was lost
            await asyncio.sleep(0.03)

    def on_delivery(self, index: int, position: MessagePosition, message: EntryMessage) -> None:
        """Record a delivery; for Key_Shared, check that no other live consumer of the same
        owner still holds an earlier message of its key unacknowledged."""
        self.sessions[index].append(position)
        self.delivered_msgs[position] = message
        self.unacked[index][position] = message.key
        if self.s.sub_type is not SubscriptionType.KEY_SHARED or len(self.key_order) >= 5:
            return
        owner, _ = where = self.session_at[index]
        for other in self._live_sessions(owner) if owner.process.up else ():
            if other == index or self.session_at[other] != where:
                continue
            held = [p for p, key in self.unacked[other].items() if key == message.key and p < position]
            if held:
                self.key_order.append(
                    f"KEY_ORDER: {position} (key {message.key!r}) went to session {index} while session"
                    f" {other} still held {min(held)} of the same key unacknowledged"
                )

    def _ack(self, sub: Subscription, consumer_id: int, position: MessagePosition, index: int) -> None:
        self.consumer_acked.add(position)
        self.unacked[index].pop(position, None)
        sub.ack(consumer_id, [position])

    # ------------------------------------------------------------ cursor writes

    def on_write(self) -> None:
        kv = self.world.memory._state.data.get(keys.cursor(TOPIC.path, SUBSCRIPTION))
        if kv is None or (self.cursor_writes and self.cursor_writes[-1][0] >= kv.mod_revision):
            return
        self.cursor_writes.append((kv.mod_revision, Cursor.restore(orjson.loads(kv.value)["cursor"])))


def _key(s: TopicScenario, seq: int) -> bytes:
    return f"k{seq % s.keys}".encode()


def _failed(why: str) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(RequestFailed(why))
    return future


def _ack_ahead(sub: Subscription, topic: Topic) -> None:
    """The control's broken rule: whenever the consumer acks a message, the
    subscription acks everything the log holds up to its last entry as well (past
    what it delivered: as if it took reading for acking)."""
    ack = sub.ack

    def ahead(consumer_id: int, positions: Any) -> int:
        changed = ack(consumer_id, positions)
        sub.cursor.expire(topic.log.last_confirmed, topic.log.layout)
        return changed

    sub.ack = ahead  # type: ignore[method-assign]


# ---------------------------------------------------------------- the run


def run_topic(s: TopicScenario) -> TopicOutcome:
    world = World(s.storage)
    try:
        return _run_topic(world, s)
    except Stalled as exc:
        return TopicOutcome(s, [f"liveness: the world stalled: {exc}", *world.loop.errors])
    finally:
        world.loop.close()


def _run_topic(world: World, s: TopicScenario) -> TopicOutcome:
    loop, nodes = world.loop, world.nodes
    violations: list[str] = []
    run = TopicRun(world, s)
    store = world.store
    previous = store._on_write

    def on_write() -> None:
        previous()
        run.on_write()

    store._on_write = on_write
    for node in nodes:
        node.start()
    loop.run_until(lambda: all(node.ready for node in nodes), 10.0)
    if s.load_manager:
        run.load_manager.start(run.lead_loads)
    run.gateways[0].start()
    run.deadline_ms = (
        max(s.storage.faults_end_ms, sum(s.handover_ms) + 2000 * GATEWAY_LEASE_S * len(s.kinds)) + 2000
    )
    client = run.client
    done = {"handovers": False}

    async def handovers() -> None:
        await run.hand_overs()
        done["handovers"] = True

    async def clients() -> None:
        consumer = loop.create_task(run.consume(lambda: run.producing_done and done["handovers"]))
        while not run.sessions:
            await asyncio.sleep(0.005)
        await run.produce()
        await consumer

    client.start(clients)
    loop.call_soon(lambda: loop.create_task(handovers()), context=client.context)
    inject_faults(world)
    if not loop.run_until(lambda: run.producing_done and done["handovers"], SIM_TIME_MAX_S):
        violations.append(f"liveness: the clients not done by {world.clock.now_ms()}ms")
    # the end: every node up, a last hand-over to a fresh gateway, read back and drain
    for node in nodes:
        if not node.up:
            node.start()
    loop.run_until(lambda: all(n.ready for n in nodes), loop.time() + 30)
    final = SimGateway(run, "gC")
    run.gateways.append(final)
    for gateway in run.gateways[:2]:
        gateway.process.kill()  # the last owner takes over once their leases ran out
    drained: dict[str, str] = {}

    async def read_back(service: BrokerService) -> None:
        topic = await service.topic(TOPIC)
        found: list[tuple[MessagePosition, EntryMessage]] = []
        position: Position | None = topic.log.layout.next_position(EARLIEST)
        while position is not None:
            entries = await topic.log.read(position, 100)
            if not entries:
                nxt = topic.log.layout.next_position(Position(position.ledger_id, position.entry_id - 1))
                if nxt is None or nxt <= position:
                    break
                position = nxt
                continue
            for at, payload in entries:
                messages = decode_entry(payload)
                batched = len(messages) > 1
                for i, message in enumerate(messages):
                    found.append(
                        (MessagePosition(at.ledger_id, at.entry_id, i if batched else NO_BATCH), message)
                    )
            position = Position(entries[-1][0].ledger_id, entries[-1][0].entry_id + 1)
        run.read_back = found

    async def finish() -> None:
        await run._take_over(final)
        for _ in range(20):
            try:
                await run.call(final, read_back)
                break
            except (RequestFailed, TimeoutError) as exc:
                drained["error"] = repr(exc)
                await asyncio.sleep(0.1)
        else:
            return
        drained["read"] = "yes"
        wanted = {p for p, _ in run.read_back}
        end_at = world.clock.now_ms() + 5_000
        await run.consume(
            lambda: (
                world.clock.now_ms() > end_at or wanted <= {p for session in run.sessions for p in session}
            )
        )

    fin = {"done": False}

    async def finish_main() -> None:
        try:
            await finish()
        finally:
            fin["done"] = True

    loop.call_soon(lambda: loop.create_task(finish_main()), context=client.context)
    if not loop.run_until(lambda: fin["done"], loop.time() + 60):
        violations.append(f"liveness: the read-back and drain not done by {world.clock.now_ms()}ms")
    if "read" not in drained:
        why = drained.get("error", "")
        violations.append(f"liveness: the last owner could not read the log back: {why}")
    violations += check(run)
    violations += [f"unexpected error: {error}" for error in loop.errors]
    stats = {
        "confirmed": len(run.confirmed),
        "duplicates": sum(1 for p in run.confirmed.values() if p is None),
        "stored": len(run.read_back),
        "sessions": len(run.sessions),
        "delivered": sum(len(d) for d in run.sessions),
        "cursor_writes": len(run.cursor_writes),
        "owners": run.owners,
        "assigned": run.assigned,
        "node_kills": sum(n.process.kills for n in nodes),
        "sim_ms": world.clock.now_ms(),
    }
    return TopicOutcome(s, violations, stats)


# ---------------------------------------------------------------- checks


def check(run: TopicRun) -> list[str]:
    problems: list[str] = []
    stored: dict[int, MessagePosition] = {}
    last_seq = -1
    for position, message in run.read_back:
        seq = message.sequence_id
        if message.producer_name != PRODUCER or message.payload != f"{PRODUCER}/{seq}".encode():
            problems.append(f"{position}: a message nobody published: {message.payload!r}")
            continue
        if seq in stored:
            problems.append(f"DUPLICATE: sequence id {seq} stored twice, at {stored[seq]} and {position}")
        elif run.s.dedup and seq < last_seq:
            problems.append(f"ORDER: sequence id {seq} at {position} after sequence id {last_seq}")
        stored.setdefault(seq, position)
        last_seq = max(last_seq, seq)
    for seq, confirmed_at in sorted(run.confirmed.items()):
        found = stored.get(seq)
        if found is None:
            problems.append(f"LOSS: sequence id {seq}, confirmed at {confirmed_at}, is not in the log")
        elif confirmed_at is not None and found != confirmed_at:
            problems.append(f"sequence id {seq} confirmed at {confirmed_at} but stored at {found}")
    delivered: set[MessagePosition] = set()
    sub_type = run.s.sub_type

    def order_group(message: EntryMessage) -> bytes | None:
        """Deliveries to one session come in log order within a group: the whole log for
        Exclusive and Failover, each key for Key_Shared; Shared promises no order."""
        if sub_type is SubscriptionType.KEY_SHARED:
            return message.key
        return None if sub_type.single_active else message.payload

    for index, session in enumerate(run.sessions):
        restored = run.restored[index]
        twice = 0
        last_of: dict[bytes | None, MessagePosition] = {}  # the session's last delivery, per order group
        for position in session:
            group = order_group(run.delivered_msgs[position])
            before = last_of.get(group)
            if before is not None and position <= before:
                problems.append(f"session {index}: {position} delivered after {before}")
            last_of[group] = position
            if restored.is_acked(position) and twice < 5:  # a few per session: room for the rest
                twice += 1
                problems.append(
                    f"TWICE: session {index} got {position}, acked and persisted before it started"
                )
        delivered.update(session)
    problems += run.key_order
    in_log = {p for p, _ in run.read_back}
    for seq in sorted(run.confirmed):
        at = stored.get(seq)
        if at is not None and at not in delivered:
            problems.append(f"UNDELIVERED: sequence id {seq} at {at} never reached the consumer")
    last = Position(-1, -1)
    for revision, cursor in run.cursor_writes:
        if cursor.mark_delete < last:
            problems.append(
                f"CURSOR: mark-delete {cursor.mark_delete} at revision {revision} is below {last}"
            )
        last = max(last, cursor.mark_delete)
        ahead = sorted(p for p in in_log if cursor.is_acked(p) and p not in run.consumer_acked)
        if ahead:
            problems.append(f"CURSOR: revision {revision} acks {ahead[:3]}, which the consumer never acked")
    return problems[:50]
