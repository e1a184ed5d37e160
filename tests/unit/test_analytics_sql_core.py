"""SQL over topics, the pure part (spark/folio_analytics/sql_core.py): names, bounds, cells."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from folio_analytics.sql_core import Limits, QueryError, cell, rewrite, view_name

pytestmark = pytest.mark.unit


def test_quoted_topics_become_views_and_other_strings_stay() -> None:
    text, views = rewrite(
        'SELECT o.key FROM "public/default/orders" o JOIN "persistent://acme/prod/pay-1" p '
        "ON o.key = p.key WHERE o.key <> \"plain\" AND o.producer = 'a/b/c'"
    )
    assert views == {
        view_name("persistent://public/default/orders"): "persistent://public/default/orders",
        view_name("persistent://acme/prod/pay-1"): "persistent://acme/prod/pay-1",
    }
    for view in views:
        assert f"`{view}`" in text
    assert '"plain"' in text and "'a/b/c'" in text and '"public/default/orders"' not in text


def test_bounds_are_checked() -> None:
    with pytest.raises(QueryError, match="empty query"):
        rewrite("  ")
    with pytest.raises(QueryError, match="characters"):
        rewrite("x" * 10_001)
    for bad in ({"max_rows": 0}, {"max_rows": 10_001}, {"max_bytes": (1 << 20) + 1}, {"timeout_s": 301}):
        with pytest.raises(QueryError):
            Limits(**bad)
    assert Limits(10, 100, 5).timeout_s == 5


def test_cells_are_json() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert cell(when) == "2026-01-02T03:04:05+00:00"
    assert cell(b"\x00\xff") == "AP8="
    assert cell(decimal.Decimal("1.50")) == "1.50"
    assert cell({"a": [b"x", None]}) == {"a": ["eA==", None]}
