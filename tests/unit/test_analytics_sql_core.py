"""SQL over topics, the pure part (spark/folio_analytics/sql_core.py): names, bounds, cells."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from folio_analytics.sql_core import (
    Limits,
    QueryError,
    cell,
    failure_reason,
    missing_topics,
    rewrite,
    topic_path,
    view_name,
)

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


def test_a_missing_topic_says_what_to_do() -> None:
    one = str(missing_topics(["persistent://public/default/nosuch"]))
    assert one.startswith(
        "topic persistent://public/default/nosuch does not exist; create it or check the name"
    )
    two = str(missing_topics(["persistent://a/b/c", "persistent://a/b/d"]))
    assert two.startswith("topics persistent://a/b/c, persistent://a/b/d do not exist;")
    assert topic_path("persistent://public/default/x") == "persistent/public/default/x"


def test_a_python_data_source_failure_gives_its_cause_not_the_traceback_header() -> None:
    text = (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to generate Python data source read partitions: "
        "Traceback (most recent call last):\n"
        '  File "/x/pyspark_folio/batch.py", line 49, in partitions\n'
        "    return asyncio.run(self._plan())\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "ValueError: topics not found: persistent://a/b/c; create them or check the names\n"
        "\n"
        "JVM stacktrace:\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        "\tat org.apache.spark.sql.execution.python.X.run(X.scala:1)\n"
    )
    assert failure_reason(text) == "topics not found: persistent://a/b/c; create them or check the names"
    chained = (
        "Traceback (most recent call last):\n  File 'a', line 1\nKeyError: 'x'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n  File 'b', line 2\n"
        "pyspark_folio.options.OptionError: unknown option startingOffset\n"
    )
    assert failure_reason(chained) == "unknown option startingOffset"


def test_a_failure_without_a_traceback_keeps_its_first_line() -> None:
    first = "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'. SQLSTATE: 42601 (line 1, pos 0)"
    assert failure_reason(f"{first}\n\n== SQL ==\nSELEC") == first
    assert failure_reason("  ") == "unknown error"
