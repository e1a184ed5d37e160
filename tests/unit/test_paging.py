"""Server-side search and paging of admin lists (pure)."""

from __future__ import annotations

import pytest

from gateway.api.paging import LIMIT_MAX, PageParams, page
from gateway.meta.errors import InvalidArgument

pytestmark = pytest.mark.unit

TOPICS = [f"persistent://t/n/orders-{i}" for i in range(5)] + ["persistent://t/n/Payments"]


def test_no_parameters_is_everything() -> None:
    assert page(TOPICS) == (TOPICS, 6)


def test_search_is_a_case_insensitive_substring() -> None:
    assert page(TOPICS, "PAY") == (["persistent://t/n/Payments"], 1)
    assert page(TOPICS, "nothing") == ([], 0)


def test_offset_and_limit_slice_after_search_and_total_counts_matches() -> None:
    got, total = page(TOPICS, "orders", offset=1, limit=2)
    assert got == ["persistent://t/n/orders-1", "persistent://t/n/orders-2"] and total == 5
    assert page(TOPICS, "orders", offset=4, limit=10) == (["persistent://t/n/orders-4"], 5)
    assert page(TOPICS, offset=99) == ([], 6)
    assert page(TOPICS, limit=0) == ([], 6)


def test_bad_parameters_are_invalid_arguments() -> None:
    with pytest.raises(InvalidArgument):
        page(TOPICS, offset=-1)
    with pytest.raises(InvalidArgument):
        page(TOPICS, limit=LIMIT_MAX + 1)
    with pytest.raises(InvalidArgument):
        PageParams(limit=-1).apply(TOPICS)


def test_page_params_apply() -> None:
    assert PageParams("orders-3").apply(TOPICS) == (["persistent://t/n/orders-3"], 1)
