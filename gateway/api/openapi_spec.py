"""The gateway's OpenAPI document, generated from the app itself (no running cluster).

Owns: building the document ``openapi/openapi.json`` commits, from an app around
a gateway on an in-memory store (nothing is started). Rule: the committed file
is exactly what the app generates; a test fails on drift, and
``python -m gateway.api.openapi_spec > openapi/openapi.json`` regenerates it.
Its shape (tags, operation ids, no 422s) is ``gateway.api.openapi``'s.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

from coordination.clock import SystemClock
from coordination.memory_store import MemoryStore
from gateway.api.app import create_app
from gateway.process import Gateway, GatewayConfig


def spec() -> dict[str, Any]:
    gateway = Gateway(
        MemoryStore(SystemClock()), GatewayConfig(gateway_id="spec", http_url="http://127.0.0.1:8080")
    )
    document: dict[str, Any] = create_app(gateway, manage_lifecycle=False).openapi()
    return document


def render() -> bytes:
    return orjson.dumps(spec(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


if __name__ == "__main__":
    sys.stdout.buffer.write(render())
