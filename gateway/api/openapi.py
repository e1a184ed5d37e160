"""The gateway's OpenAPI document, generated from the app itself (no running cluster).

Owns: building the spec that ``openapi/openapi.json`` commits. Rule: the
committed file is exactly what the app generates; a test fails on drift, and
``python -m gateway.api.openapi > openapi/openapi.json`` regenerates it.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

from coordination.clock import SystemClock
from coordination.memory_store import MemoryStore


def spec() -> dict[str, Any]:
    from gateway.api.app import create_app
    from gateway.api.gateway import Gateway, GatewayConfig

    gateway = Gateway(
        MemoryStore(SystemClock()), GatewayConfig(gateway_id="spec", http_url="http://127.0.0.1:8080")
    )
    document: dict[str, Any] = create_app(gateway, manage_lifecycle=False).openapi()
    return document


def render() -> bytes:
    return orjson.dumps(spec(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


if __name__ == "__main__":
    sys.stdout.buffer.write(render())
