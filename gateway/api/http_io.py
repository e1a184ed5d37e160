"""HTTP plumbing of the REST routes: bounded body reading, JSON replies.

Owns: reading a request body within a limit (413 by declared or streamed size,
a client hang-up is a 400, never a traceback) and JSON replies. Rule: memory
per request is bounded by the limit, not by the client.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.errors import GatewayError

ACK_BODY_MAX = 4 * 1024 * 1024
JSON = "application/json"


class BodyTooLarge(GatewayError):
    code = "payload_too_large"


class ClientGone(GatewayError):
    code = "bad_request"


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) beyond ``limit`` bytes - by its declared
    Content-Length before reading, else while reading - so memory stays bounded."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes exceeds the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect as exc:
        raise ClientGone("the client went away while sending the body") from exc
    return b"".join(chunks)


def json_response(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type=JSON)
