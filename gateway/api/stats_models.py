"""Typed models of the stats replies, for the OpenAPI document and generated clients.

Owns: ``TopicStats`` (Pulsar's TopicStats with its ``PublisherStats``,
``SubscriptionStats`` and ``ConsumerStats``), ``PartitionedTopicStats`` and
``PersistentTopicInternalStats`` (with ``LedgerInfo`` and ``CursorStats``).
Rules: the routes keep building their JSON with ``gateway.broker.stats`` /
``topic_stats`` (fast, no validation on the hot admin path); these models only
describe it, field for field with Pulsar's names, so a client generated from
the document gets objects with typed attributes instead of dicts. Every field
the builders write is declared; rates and sizes that may be fractional are
``float``; fields Pulsar may add later are allowed (``extra="allow"``), and
schemathesis checks every reply against these schemas.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Stats(BaseModel):
    model_config = ConfigDict(extra="allow")


class PublisherStats(_Stats):
    accessMode: str
    msgRateIn: float
    msgThroughputIn: float
    averageMsgSize: float
    chunkedMessageRate: float
    producerId: int
    supportsPartialProducer: bool
    producerName: str
    address: str
    connectedSince: str = Field(description="ISO-8601")
    clientVersion: str
    metadata: dict[str, str]


class _Dispatched(_Stats):
    # what a consumer, and a subscription over its consumers, dispatched and had acked
    msgRateOut: float
    msgThroughputOut: float
    bytesOutCounter: int
    msgOutCounter: int
    msgRateRedeliver: float
    messageAckRate: float
    chunkedMessageRate: float


class ConsumerStats(_Dispatched):
    consumerName: str
    availablePermits: int
    unackedMessages: int
    avgMessagesPerEntry: float
    blockedConsumerOnUnackedMsgs: bool
    readPositionWhenJoining: str | None = None
    address: str
    connectedSince: str = Field(description="ISO-8601")
    clientVersion: str
    lastAckedTimestamp: int
    lastConsumedTimestamp: int
    lastConsumedFlowTimestamp: int
    keyHashRanges: list[str] = Field(description='Key_Shared: inclusive ranges, e.g. "[0, 16383]"')
    metadata: dict[str, str]


class SubscriptionStats(_Dispatched):
    msgBacklog: int
    backlogSize: int
    earliestMsgPublishTimeInBacklog: int
    msgBacklogNoDelayed: int
    blockedSubscriptionOnUnackedMsgs: bool
    msgDelayed: int
    unackedMessages: int
    type: str = Field(description="Exclusive, Shared, Failover or Key_Shared")
    activeConsumerName: str | None = None
    msgRateExpired: float
    totalMsgExpired: int
    lastExpireTimestamp: int
    lastConsumedFlowTimestamp: int
    lastConsumedTimestamp: int
    lastAckedTimestamp: int
    lastMarkDeleteAdvancedTimestamp: int
    consumers: list[ConsumerStats]
    isDurable: bool
    isReplicated: bool
    allowOutOfOrderDelivery: bool
    consumersAfterMarkDeletePosition: dict[str, str]
    nonContiguousDeletedMessagesRanges: int
    nonContiguousDeletedMessagesRangesSerializedSize: int
    subscriptionProperties: dict[str, str]
    keySharedMode: str | None = Field(None, description="Key_Shared: AUTO_SPLIT or STICKY")


class CompactionStats(_Stats):
    lastCompactionRemovedEventCount: int
    lastCompactionSucceedTimestamp: int


class TopicStats(_Stats):
    msgRateIn: float
    msgThroughputIn: float
    msgRateOut: float
    msgThroughputOut: float
    bytesInCounter: int
    msgInCounter: int
    bytesOutCounter: int
    msgOutCounter: int
    averageMsgSize: float
    msgChunkPublished: bool
    storageSize: int
    backlogSize: int
    earliestMsgPublishTimeInBacklogs: int
    offloadedStorageSize: int
    lastOffloadLedgerId: int
    lastOffloadSuccessTimeStamp: int
    lastOffloadFailureTimeStamp: int
    waitingPublishers: int
    publishers: list[PublisherStats]
    subscriptions: dict[str, SubscriptionStats]
    replication: dict[str, dict[str, object]]
    deduplicationStatus: str = Field(description="Enabled or Disabled")
    topicEpoch: int | None = None
    nonContiguousDeletedMessagesRanges: int
    nonContiguousDeletedMessagesRangesSerializedSize: int
    compaction: CompactionStats


class PartitionedMetadata(_Stats):
    partitions: int


class PartitionedTopicStats(TopicStats):
    metadata: PartitionedMetadata
    partitions: dict[str, TopicStats] = Field(description="each partition's stats (with perPartition=true)")


class LedgerInfo(_Stats):
    ledgerId: int
    entries: int
    size: int
    offloaded: bool
    underReplicated: bool | None = None
    state: str | None = Field(None, description="Folio: open or closed")
    messages: int | None = Field(None, description="Folio: messages in the ledger, when counted")
    ensembles: dict[str, list[str]] | None = Field(
        None, description="Folio: first entry id -> the storage nodes holding the entries from it"
    )


class CursorStats(_Stats):
    markDeletePosition: str
    readPosition: str
    waitingReadOp: bool
    pendingReadOps: int
    messagesConsumedCounter: int
    cursorLedger: int
    cursorLedgerLastEntry: int
    individuallyDeletedMessages: str
    lastLedgerSwitchTimestamp: str
    state: str
    active: bool
    numberOfEntriesSinceFirstNotAckedMessage: int
    totalNonContiguousDeletedMessagesRange: int
    subscriptionHavePendingRead: bool
    subscriptionHavePendingReplayRead: bool
    properties: dict[str, int]


class PersistentTopicInternalStats(_Stats):
    entriesAddedCounter: int
    numberOfEntries: int
    totalSize: int
    currentLedgerEntries: int
    currentLedgerSize: int
    lastLedgerCreatedTimestamp: str
    lastLedgerCreationFailureTimestamp: str | None = None
    waitingCursorsCount: int
    pendingAddEntriesCount: int
    lastConfirmedEntry: str
    state: str
    ledgers: list[LedgerInfo]
    cursors: dict[str, CursorStats]
    schemaLedgers: list[LedgerInfo]
    compactedLedger: LedgerInfo


class PartitionedTopicInternalStats(_Stats):
    metadata: PartitionedMetadata
    partitions: dict[str, PersistentTopicInternalStats]


class StatsSample(_Stats):
    t: int = Field(description="epoch ms")
    msgRateIn: float
    msgRateOut: float
    msgThroughputIn: float
    msgThroughputOut: float
    msgBacklog: int
    storageSize: int


class StatsHistory(_Stats):
    intervalMs: int
    samples: list[StatsSample]
