"""Pydantic models of the messaging routes' JSON bodies - for the OpenAPI document only.

Owns: the documented shapes of the REST producer (``ProducerMessages`` in,
``ProducerAcks``/``ProducerAck`` out), the HTTP consume API (``FetchResponse``,
``AckRequest``, ``AckResult``, ``NackResult``), lookup (``LookupData``) and the
path/query parameter schemas shared by those routes. Rule: these models are
never used to parse requests - ``gateway.protocol.rest`` stays the one fast
parser and the one source of the rules - so each field here states that
parser's rule (docs/compatibility.md §2.1, §2.3, §1.6.1) as exactly as JSON Schema
can; payloads and ids that are base64 say so with ``contentEncoding: base64``.
``REQUEST_MODELS`` (with the admin bodies of ``gateway.api.admin_models``) are
added to the document's components by ``gateway.api.openapi`` (FastAPI only
lists models it parses itself).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from pydantic.config import JsonDict

from gateway.api.admin_models import ADMIN_REQUEST_MODELS
from gateway.names import NAME_MAX, PARTITIONED_TOPIC_MAX, SUBSCRIPTION_MAX, TOPIC_MAX
from gateway.protocol.json_fields import PROPERTIES_MAX
from gateway.protocol.rest import PRODUCER_NAME_CHARS_MAX, REST_BATCH_MAX
from gateway.protocol.timefmt import EPOCH_MS_MAX
from gateway.protocol.ws_commands import ACK_BATCH_MAX
from gateway.protocol.ws_frames import DELIVER_AFTER_MAX_MS
from storage.formats.message_id import INT64_MAX

# Standard base64 as the payload decoder accepts it: padding optional, never a lone 1-char tail.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}(?:==)?|[A-Za-z0-9+/]{3}=?)?$"
# gateway.names: letters, digits and _ . = : - ; not starting with . or -; no "..".
NAME_PATTERN = r"^[A-Za-z0-9_](?:[A-Za-z0-9_=:\-]|\.[A-Za-z0-9_=:\-])*\.?$"
# a topic: a name, but not the reserved "partitioned" (nor a partition of it), and a
# "-partition-<n>" suffix (n without leading zeros) needs n < 1024
_NOT_RESERVED = r"(?!partitioned(?:-partition-(?:0|[1-9][0-9]*))?$)"
_NO_BIG_PARTITION = r"(?!.*-partition-(?:102[4-9]|10[3-9][0-9]|1[1-9][0-9]{2}|[2-9][0-9]{3}|[1-9][0-9]{4,})$)"
TOPIC_PATTERN = f"^{_NOT_RESERVED}{_NO_BIG_PARTITION}{NAME_PATTERN[1:]}"
# a topic addressed with a partition index: a topic name that is not itself a partition's
PARTITIONED_TOPIC_PATTERN = f"^{_NOT_RESERVED}(?!.*-partition-(?:0|[1-9][0-9]*)$){NAME_PATTERN[1:]}"
# the base name of a new partitioned topic: a topic name without "-partition-" in it
PARTITIONED_BASE_PATTERN = f"^(?!.*-partition-){_NOT_RESERVED}{NAME_PATTERN[1:]}"
MESSAGE_ID_STRING_PATTERN = r"^-?[0-9]{1,18}:-?[0-9]{1,18}(?::(?:-1|[0-9]{1,9})(?::(?:-1|[0-9]{1,9}))?)?$"
EPOCH_MS_PATTERN = r"^[0-9]{1,14}$"
LONG_TEXT_PATTERN = r"^[+-]?[0-9]{1,19}$"  # a Java long as a JSON string (Jackson reads it)
LongText = Annotated[str, Field(pattern=LONG_TEXT_PATTERN)]
# deliverAfterMs as a JSON string: within the delay's bound (12 digits < 100 years in ms)
DELAY_TEXT_PATTERN = r"^(?:-[0-9]{1,18}|\+?[0-9]{1,12})$"
DelayText = Annotated[str, Field(pattern=DELAY_TEXT_PATTERN)]
# ISO-8601 with offset as the parsers read it, years 1971..9998 (always within 0..EPOCH_MS_MAX
# whatever the offset) and days 01..28 (always a real date): what any value of it means is certain.
ISO_PATTERN = (
    r"^(?:197[1-9]|19[89][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
    r"-(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]"
    r"(?::[0-5][0-9](?:\.[0-9]{1,9})?)?(?:[Zz]|[+-](?:0[0-9]|1[0-7]):[0-5][0-9])$"
)
PRINTABLE_NAME_PATTERN = r"^[ -~]*[!-~][ -~]*$"  # printable ASCII, not blank

_B64: JsonDict = {"contentEncoding": "base64"}


def _schema(**extra: Any) -> JsonDict:
    return extra


# ---------------------------------------------- parameters (documented, checked by the route)

DOMAIN_SCHEMA = _schema(enum=["persistent", "non-persistent"], examples=["persistent"])
TENANT_SCHEMA = _schema(pattern=NAME_PATTERN, maxLength=NAME_MAX, examples=["public"])
NAMESPACE_SCHEMA = _schema(pattern=NAME_PATTERN, maxLength=NAME_MAX, examples=["default"])
TOPIC_SCHEMA = _schema(pattern=TOPIC_PATTERN, maxLength=TOPIC_MAX, examples=["my-topic"])
PARTITIONED_TOPIC_SCHEMA = _schema(
    pattern=PARTITIONED_TOPIC_PATTERN, maxLength=PARTITIONED_TOPIC_MAX, examples=["my-topic"]
)
PARTITIONED_BASE_SCHEMA = _schema(
    pattern=PARTITIONED_BASE_PATTERN, maxLength=PARTITIONED_TOPIC_MAX, examples=["my-topic"]
)
SUBSCRIPTION_SCHEMA = _schema(pattern=NAME_PATTERN, maxLength=SUBSCRIPTION_MAX, examples=["my-sub"])
# a cluster is named like a tenant (Pulsar's NamedEntity); "health" is GET /admin/v2/brokers/health
CLUSTER_SCHEMA = _schema(pattern=f"^(?!health$){NAME_PATTERN[1:]}", maxLength=NAME_MAX, examples=["folio"])
NAME_RULE = (
    "letters, digits and `_ . = : -`, not starting with `.` or `-`, no `..` "
    "(an invalid name is answered 412 as Pulsar does)"
)
TOPIC_RULE = (
    f"{NAME_RULE}; `partitioned` is reserved (the list route's word), and a `-partition-<n>` "
    "suffix names partition n < 1024"
)


# ------------------------------------------------------------------ REST producer (PIP-64)


class _MessageFields(BaseModel):
    key: str | None = Field(None, description="partition / Key_Shared routing key")
    properties: dict[str, str] | None = Field(
        None, max_length=PROPERTIES_MAX, description="application properties"
    )
    eventTime: (
        Annotated[int, Field(ge=0, le=EPOCH_MS_MAX)]
        | Annotated[str, Field(pattern=EPOCH_MS_PATTERN)]
        | Annotated[str, Field(pattern=ISO_PATTERN)]
        | None
    ) = Field(
        None,
        description="event time: epoch ms (number or numeric string) or ISO-8601 with offset",
    )
    deliverAt: Annotated[int, Field(ge=-(2**63), le=INT64_MAX)] | LongText | None = Field(
        None, description="deliver at this epoch ms (applied when > 0); a decimal string too"
    )
    deliverAfterMs: Annotated[int, Field(ge=-(2**63), le=DELIVER_AFTER_MAX_MS)] | DelayText | None = Field(
        None,
        description="deliver this many ms after publishing (applied when > 0; wins over deliverAt); "
        "a decimal string too",
    )
    sequenceId: Annotated[int, Field(ge=0, le=INT64_MAX)] | LongText | None = Field(
        None, description="producer sequence id for deduplication (absent: assigned); a decimal string too"
    )
    replicationClusters: Any = Field(None, description="accepted and ignored (a list of cluster names)")
    disableReplication: Any = Field(None, description="accepted and ignored (a boolean)")


class TextMessage(_MessageFields):
    """A message whose payload is text, stored as its UTF-8 bytes (Pulsar's STRING schema)."""

    payloadEncoding: Literal["text"] | None = Field(
        "text", description="`text` (default): payload is UTF-8 text"
    )
    payload: str = Field(description='the message text (use "" for an empty message)')


class Base64Message(_MessageFields):
    """A message whose payload is binary, sent as base64 (Folio extra)."""

    payloadEncoding: Literal["base64"] = Field(description="`base64`: payload is base64 of the bytes")
    payload: str = Field(pattern=BASE64_PATTERN, json_schema_extra=_B64, description="base64 of the bytes")


class ProducerMessages(BaseModel):
    """The JSON body of a REST publish (PIP-64 ``ProducerMessages``)."""

    producerName: str | None = Field(
        None,
        min_length=1,
        max_length=PRODUCER_NAME_CHARS_MAX,
        pattern=PRINTABLE_NAME_PATTERN,
        description="printable, not blank; default `RestProducer`",
    )
    schemaVersion: Annotated[int, Field(ge=-(2**63), le=INT64_MAX)] | LongText | None = Field(
        None,
        description="a registered version of the topic's schema to encode the payloads with "
        "(wins over valueSchema; < 0 = none); 404 if the topic has no such version",
    )
    keySchema: str | None = Field(
        None, description="a JSON SchemaInfo the message keys are checked against (400 naming the key)"
    )
    valueSchema: str | None = Field(
        None,
        description='a JSON SchemaInfo (`{"type":"JSON","schema":<base64 definition>,...}`): '
        "found in the topic's versions or added as the next one (409 if the namespace's strategy "
        "refuses it); text payloads are encoded by it, 400 naming the payload that does not fit",
    )
    messages: list[TextMessage | Base64Message] = Field(min_length=1, max_length=REST_BATCH_MAX)


class ProducerAck(BaseModel):
    """The result of one published message (PIP-64 ``ProducerAck``)."""

    messageId: str = Field(
        description="`ledger:entry:partition` (`:batchIndex` inside a batch entry); on failure the "
        "partition index the message was routed to",
        examples=["12:3:-1"],
    )
    errorCode: int = Field(description="0 stored, 1 failed but retriable, 2 failed", ge=0, le=2)
    errorMsg: str | None = Field(None, description="why the message failed")
    schemaVersion: int = Field(0, description="the schema version the payload was encoded with")
    duplicate: bool | None = Field(
        None, description="Folio, only with markDuplicates=true: deduplication recognised a repeat"
    )


class ProducerAcks(BaseModel):
    """The reply to a JSON publish: one result per message, in order (HTTP 200 even for failures)."""

    messagePublishResults: list[ProducerAck]
    schemaVersion: int = Field(0)


# ------------------------------------------------------------------ HTTP consume (Folio)


class ConsumerMessage(BaseModel):
    """A delivered message: the same object as a WebSocket consumer's message frame."""

    messageId: str = Field(json_schema_extra=_B64, description="base64 MessageIdData")
    payload: str = Field(json_schema_extra=_B64, description="base64 of the payload bytes")
    properties: dict[str, str]
    publishTime: str = Field(description="ISO-8601 with offset", examples=["2022-09-07T01:08:23.26Z"])
    redeliveryCount: int = Field(ge=0)
    eventTime: str | None = Field(None, description="ISO-8601, present when set")
    key: str | None = Field(None, description="present when the message has a key")


class FetchResponse(BaseModel):
    """Messages handed to this HTTP consumer (empty when none arrived within ``waitMs``)."""

    messages: list[ConsumerMessage]


class AckRequest(BaseModel):
    """Ids to acknowledge (or negatively acknowledge)."""

    messageIds: list[
        Annotated[
            str,
            Field(
                pattern=MESSAGE_ID_STRING_PATTERN,
                description="`ledger:entry[:partition[:batchIndex]]`; the base64 `messageId` of a fetched "
                "message (e.g. `CAMQADAA`) is accepted too",
                examples=["3:0:-1"],
            ),
        ]
    ] = Field(min_length=1, max_length=ACK_BATCH_MAX)


class AckResult(BaseModel):
    acked: int = Field(ge=0, description="messages newly acknowledged (ids that matched)")
    unmatched: list[str] = Field(
        description="the ids, as sent, that acknowledged nothing: unknown here, of another topic or "
        "partition, or already acknowledged"
    )


class NackResult(BaseModel):
    nacked: int = Field(ge=0, description="messages scheduled for redelivery (ids that matched)")
    unmatched: list[str] = Field(
        description="the ids, as sent, that matched no unacknowledged message of this subscription"
    )


# ------------------------------------------------------------------ lookup


class LookupData(BaseModel):
    """Where a topic is served (Pulsar ``LookupData``)."""

    brokerUrl: str = Field(examples=["ws://127.0.0.1:8080"])
    httpUrl: str = Field(examples=["http://127.0.0.1:8080"])
    nativeUrl: str
    brokerUrlTls: str | None = None
    httpUrlTls: str | None = None


REQUEST_MODELS: tuple[type[BaseModel], ...] = (ProducerMessages, AckRequest, *ADMIN_REQUEST_MODELS)
