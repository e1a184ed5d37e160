"""The committed OpenAPI document is exactly what the gateway app generates."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.api.openapi import render

pytestmark = pytest.mark.unit

COMMITTED = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def test_committed_spec_matches_the_app() -> None:
    assert COMMITTED.read_bytes() == render(), (
        "openapi/openapi.json drifted from the app: regenerate it with "
        "`.venv/bin/python -m gateway.api.openapi > openapi/openapi.json`"
    )


def test_spec_names_the_messaging_and_admin_paths() -> None:
    paths = set(__import__("orjson").loads(render())["paths"])
    for path in (
        "/topics/{domain}/{tenant}/{namespace}/{topic}",
        "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}",
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}",
        "/admin/v2/brokers/health",
        "/admin/v2/namespaces/{tenant}/{namespace}",
    ):
        assert path in paths
