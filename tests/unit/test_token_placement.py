"""Where a token is taken from (``gateway.security.tokens.bearer``): the header first; a
header holding a bare token (its ``Bearer `` left out) is refused with a sentence saying
to add it; ``?token=`` only where browsers cannot set headers (WebSocket, event stream),
anywhere else refused with a sentence naming the header."""

from __future__ import annotations

import pytest

from gateway.security.tokens import AuthFailed, Failure, bearer

pytestmark = pytest.mark.unit


def test_header_and_query_forms_where_allowed() -> None:
    assert bearer("Bearer abc", None, query_allowed=False) == "abc"
    assert bearer("bearer abc", "zzz", query_allowed=False) == "abc"  # the header wins
    assert bearer(None, "abc", query_allowed=True) == "abc"
    assert bearer(None, "Bearer abc", query_allowed=True) == "abc"
    assert bearer("Basic abc", None) is None
    assert bearer(None, None, query_allowed=False) is None


def test_a_bare_token_in_the_header_says_to_add_bearer() -> None:
    for value in ("eyJh.eyJz.sig", "abc"):
        with pytest.raises(AuthFailed) as failed:
            bearer(value, None)
        assert failed.value.failure is Failure.NO_SCHEME
        assert "add 'Bearer ' before the token" in str(failed.value)


def test_query_token_refused_on_plain_routes() -> None:
    with pytest.raises(AuthFailed) as failed:
        bearer(None, "abc", query_allowed=False)
    assert failed.value.failure is Failure.QUERY_TOKEN
    assert "Authorization: Bearer <token>" in str(failed.value)
    assert "WebSocket and event-stream" in str(failed.value)
