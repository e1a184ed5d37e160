"""A 503 for a topic whose ownership moved while it loaded says when to retry."""

from __future__ import annotations

import httpx

from gateway.api.errors import error_response
from gateway.broker.broker_errors import OwnershipMovedWhileLoading, TopicUnavailable


def test_a_move_during_the_load_is_a_503_with_retry_after() -> None:
    response = error_response(OwnershipMovedWhileLoading("moved while it loaded"))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"


def test_other_503s_carry_no_retry_after() -> None:
    response = error_response(TopicUnavailable("closing"))
    assert response.status_code == 503
    assert "Retry-After" not in response.headers


def test_an_unreachable_owner_is_a_503_with_retry_after() -> None:
    response = error_response(httpx.ConnectTimeout("owner gateway did not take the connection"))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert b"owner_unreachable" in response.body
