"""The wire protocol of the gateway's WebSocket and REST interfaces (pure).

Owns: parsing what clients send (handshake query parameters, WebSocket text
frames, REST bodies and headers) into typed values, and building what the
gateway sends back, byte for byte as docs/compatibility.md §1-2 describe, plus the
documented Folio extras. Rule: no I/O, no clock (callers pass ``now_ms``),
JSON through orjson; every malformed input raises a ``ProtocolError``
subclass (``gateway.protocol.errors``) with a message that says what is wrong.

Modules: ``errors`` (error tree, WebSocketError codes), ``timefmt`` (ISO-8601
timestamps), ``fields`` (strict JSON field access, base64, ids), ``params``
(query parameters), ``ws_frames`` (publish frames and replies, deliveries,
notices), ``ws_commands`` (consumer/reader commands), ``rest`` (REST producer,
raw-body publish, HTTP consume).
"""

from gateway.protocol.errors import BadRequest, FrameError, InvalidParams, PayloadTooLarge, ProtocolError
from gateway.protocol.params import (
    ConsumerParams,
    ProducerParams,
    ReaderParams,
    parse_consumer_params,
    parse_producer_params,
    parse_reader_params,
)
from gateway.protocol.ws_frames import PublishRequest

__all__ = [
    "BadRequest",
    "ConsumerParams",
    "FrameError",
    "InvalidParams",
    "PayloadTooLarge",
    "ProducerParams",
    "ProtocolError",
    "PublishRequest",
    "ReaderParams",
    "parse_consumer_params",
    "parse_producer_params",
    "parse_reader_params",
]
