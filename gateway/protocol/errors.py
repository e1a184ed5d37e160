"""Typed errors of the WebSocket / REST protocol layer (pure).

Owns: ``ProtocolError`` and its subclasses, raised by the parsers of
``gateway.protocol`` when a client sends something malformed, plus the table
of Pulsar ``WebSocketError`` codes. Rule (docs/compatibility.md §1.3, docs/architecture.md §11):
every error carries a stable ``code``, ``retriable = False`` and the Pulsar
WebSocket error code ``ws_code`` (1..8) the edge uses for ``send-error:<n>``
replies or close reasons; the mapping to HTTP status / close codes stays at
the edge. ``context`` is the publish request's correlation id when it could be
read, so an error reply can echo it even though other fields were bad.

Tree::

    GatewayError
     └── ProtocolError            (ws_code 8 unless said otherwise)
          ├── InvalidParams       bad query parameter; HTTP 400 "Invalid query params: ..."
          ├── FrameError          bad WebSocket frame: JSON/types -> 3, payload encoding -> 7
          ├── PayloadTooLarge     decoded payload above the configured limit
          └── BadRequest          bad REST body or headers; HTTP 400
"""

from __future__ import annotations

from gateway.errors import GatewayError

WS_FAILED_TO_CREATE_PRODUCER = 1
WS_FAILED_TO_SUBSCRIBE = 2
WS_FAILED_TO_DESERIALIZE = 3
WS_FAILED_TO_SERIALIZE = 4
WS_AUTHENTICATION_ERROR = 5
WS_NOT_AUTHORIZED = 6
WS_PAYLOAD_ENCODING_ERROR = 7
WS_UNKNOWN_ERROR = 8

WS_ERROR_DESCRIPTIONS: dict[int, str] = {
    WS_FAILED_TO_CREATE_PRODUCER: "Failed to create producer",
    WS_FAILED_TO_SUBSCRIBE: "Failed to subscribe",
    WS_FAILED_TO_DESERIALIZE: "Failed to de-serialize from JSON",
    WS_FAILED_TO_SERIALIZE: "Failed to serialize to JSON",
    WS_AUTHENTICATION_ERROR: "Failed to authenticate client",
    WS_NOT_AUTHORIZED: "Client is not authorized",
    WS_PAYLOAD_ENCODING_ERROR: "Invalid payload encoding",
    WS_UNKNOWN_ERROR: "Unknown error",
}

INVALID_PARAMS_PREFIX = "Invalid query params: "

# ``errorCode`` of a publish result (Pulsar's ProducerAck): 0 stored, 1 failed but retriable, 2 failed
ERROR_RETRIABLE, ERROR_NOT_RETRIABLE = 1, 2


def ws_close_reason(ws_code: int, detail: str = "") -> str:
    """Pulsar's close reason: the code's description, then ``": " + detail`` if any."""
    description = WS_ERROR_DESCRIPTIONS[ws_code]
    return f"{description}: {detail}" if detail else description


class ProtocolError(GatewayError):
    """A client sent a request the protocol layer cannot accept."""

    code = "protocol_error"
    ws_code = WS_UNKNOWN_ERROR

    def __init__(self, message: str, *, ws_code: int | None = None, context: str | None = None) -> None:
        super().__init__(message)
        if ws_code is not None:
            assert ws_code in WS_ERROR_DESCRIPTIONS, ws_code
            self.ws_code = ws_code
        self.message = message
        self.context = context


class InvalidParams(ProtocolError):
    """A query parameter of a WebSocket handshake has a bad value (HTTP 400).
    ``detail`` is the part after the fixed prefix ``"Invalid query params: "``."""

    code = "invalid_params"

    def __init__(self, detail: str) -> None:
        super().__init__(INVALID_PARAMS_PREFIX + detail)
        self.detail = detail


class FrameError(ProtocolError):
    """A WebSocket text frame is malformed: ``ws_code`` 3 for JSON syntax, wrong
    types and bad ids, 7 for a missing or undecodable payload or event time."""

    code = "invalid_frame"

    def __init__(self, ws_code: int, message: str, context: str | None = None) -> None:
        super().__init__(message, ws_code=ws_code, context=context)


class PayloadTooLarge(ProtocolError):
    """A message payload, once decoded, is larger than the configured maximum.
    Over WebSocket it is a failed send (``send-error:8``), as upstream."""

    code = "payload_too_large"

    def __init__(self, size: int, limit: int, context: str | None = None) -> None:
        super().__init__(
            f"Message payload of {size} bytes exceeds the limit of {limit} bytes", context=context
        )
        self.size = size
        self.limit = limit


class BadRequest(ProtocolError):
    """A REST body or header is malformed (HTTP 400 with this message)."""

    code = "bad_request"
