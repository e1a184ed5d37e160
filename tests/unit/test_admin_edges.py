"""The edges of the admin API that its OpenAPI description relies on.

- the documented name patterns accept exactly the names ``gateway.names`` accepts,
  including the reserved topic name ``partitioned`` (the list route's word: a topic
  of that name could not be administered, so none may exist - publishing to it is
  refused too) and partition suffixes;
- the routes whose paths overlap a literal route do not swallow it: ``PUT``/``DELETE``
  on ``…/{namespace}/partitioned`` and ``PUT …/permissions/unload`` answer 405 with
  the documented ``Allow``;
- the admin body reader: JSON whatever the content type, whole-number floats as
  integers, no ``null`` and no bare words; ``ResetCursorData`` field rules;
- paging bounds are validated (400 ``ErrorBody``) before any work.
In-process (httpx ASGI transport over an in-memory store, nothing started).
"""

from __future__ import annotations

import re

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordination.clock import SystemClock
from coordination.memory_store import MemoryStore
from gateway.api import messaging_models
from gateway.api.admin_bodies import CursorTarget, parse_target
from gateway.api.admin_common import decode_json
from gateway.api.app import create_app
from gateway.meta.errors import InvalidArgument
from gateway.names import PARTITIONED_TOPIC_MAX, TOPIC_MAX, InvalidName, TopicName
from gateway.process import Gateway, GatewayConfig
from storage.formats.message_id import INT64_MAX
from storage.formats.positions import EARLIEST, LATEST, Position

pytestmark = pytest.mark.unit

SPECIAL = [
    "partitioned",
    "partitioned-partition-0",
    "partitioned-partition-1023",
    "partitioned-partition-007",
    "partitioned-x",
    "Partitioned",
    "t-partition-0",
    "t-partition-1023",
    "t-partition-1024",
    "t-partition-99999",
    "t-partition-01",
    "t-partition-",
    "-partition-3",
    "a..b",
    "a.",
    ".a",
    "a" * TOPIC_MAX,
    "a" * (TOPIC_MAX + 1),
]
NAMES = st.one_of(
    st.sampled_from(SPECIAL),
    st.from_regex(messaging_models.TOPIC_PATTERN, fullmatch=True),
    st.text(alphabet="ap-0123456789rtiond.:=_ /", max_size=30),
)


def documented(pattern: str, max_length: int, name: str) -> bool:
    return len(name) <= max_length and re.fullmatch(pattern, name) is not None


def accepted(local: str) -> bool:
    try:
        TopicName.of("persistent", "t", "ns", local)
    except InvalidName:
        return False
    return True


def base_accepted(local: str) -> bool:
    try:
        TopicName.of("persistent", "t", "ns", local).check_partitioned_base()
    except InvalidName:
        return False
    return True


@settings(max_examples=300, deadline=None, database=None)
@given(NAMES)
def test_topic_patterns_are_the_name_rules(name: str) -> None:
    assert documented(messaging_models.TOPIC_PATTERN, TOPIC_MAX, name) == accepted(name), name
    base = documented(messaging_models.PARTITIONED_BASE_PATTERN, PARTITIONED_TOPIC_MAX, name)
    assert base == base_accepted(name), name


def test_partitioned_is_reserved_everywhere() -> None:
    for local in ("partitioned", "partitioned-partition-2"):
        with pytest.raises(InvalidName, match="reserved"):
            TopicName.parse(f"persistent://public/default/{local}")
    assert TopicName.parse("persistent://public/default/partitioned-2").local == "partitioned-2"
    with pytest.raises(InvalidName, match="must not contain"):
        TopicName.of("persistent", "t", "ns", "a-partition-x").check_partitioned_base()
    with pytest.raises(InvalidName, match="longer than"):
        TopicName.of("persistent", "t", "ns", "a" * (PARTITIONED_TOPIC_MAX + 1)).check_partitioned_base()


@pytest.fixture
async def client() -> httpx.AsyncClient:
    gateway = Gateway(MemoryStore(SystemClock()), GatewayConfig("unit", "http://127.0.0.1:1"))
    app = create_app(gateway, manage_lifecycle=False)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://unit")


async def test_literal_routes_keep_their_methods(client: httpx.AsyncClient) -> None:
    listing = "/admin/v2/persistent/public/default/partitioned"
    async with client:
        answers = [await client.request(method, listing) for method in ("PUT", "DELETE", "OPTIONS")]
        role = await client.put("/admin/v2/namespaces/public/default/permissions/unload")
        published = await client.post(
            "/topics/persistent/public/default/partitioned", json={"messages": [{"payload": "x"}]}
        )
        bundle = await client.put("/admin/v2/namespaces/public/default/0x00000000_0x40000000/unload")
    for answer in answers:
        assert answer.status_code == 405, answer.text
        assert answer.headers["allow"] == "GET"
        assert answer.json()["code"] == "method_not_allowed"
    assert (role.status_code, role.headers["allow"]) == (405, "POST, DELETE")
    assert published.status_code == 412 and "reserved" in published.json()["reason"]
    assert bundle.status_code == 404 and bundle.json()["code"] == "not_found"  # routed: no such namespace


async def test_paging_bounds_are_validated(client: httpx.AsyncClient) -> None:
    async with client:
        for query in ({"offset": -1}, {"limit": 1001}, {"limit": -1}, {"search": "x" * 513}):
            answer = await client.get("/admin/v2/storage/nodes", params=query)
            assert answer.status_code == 400, (query, answer.text)
            assert answer.json()["code"] == "invalid_argument"


async def test_json_routes_take_only_json(client: httpx.AsyncClient) -> None:
    """A JSON route refuses any other Content-Type (415): a cross-site form (urlencoded,
    text/plain, multipart) cannot set a policy."""
    path = "/admin/v2/namespaces/public/default/messageTTL"
    async with client:
        for media in ("application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x"):
            refused = await client.post(path, content=b"60", headers={"content-type": media})
            assert refused.status_code == 415 and refused.json()["code"] == "bad_media", media
        json = {"content-type": "application/json"}
        not_json = await client.post(path, content=b"{1", headers=json)
        fraction = await client.post(path, content=b"2.5", headers=json)
        whole = await client.post(path, content=b"60.0", headers=json)
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["reason"]
    assert fraction.status_code == 400 and "must be an integer" in fraction.json()["reason"]
    assert whole.status_code == 404  # valid: only then is the namespace looked up


def test_body_reader() -> None:
    assert decode_json(b' {"a": 3.0, "b": [2.0, 2.5, -0.0], "c": 9007199254740994.0} ') == {
        "a": 3,
        "b": [2, 2.5, 0],
        "c": 9007199254740994.0,  # beyond 2^53: not an exact integer, left as it is
    }
    assert decode_json(b"", required=False) is None
    for body, reason in ((b"", "required"), (b"null", "null"), (b"latest", "not JSON")):
        with pytest.raises(InvalidArgument, match=reason):
            decode_json(body)


def test_reset_cursor_data() -> None:
    assert parse_target("Earliest") == CursorTarget(EARLIEST)
    assert parse_target({"ledgerId": -1, "entryId": -5}) == CursorTarget(EARLIEST)
    assert parse_target({"ledgerId": INT64_MAX, "entryId": INT64_MAX}) == CursorTarget(LATEST)
    both = {"ledgerId": 3, "entryId": 4, "batchIndex": 2, "isExcluded": True, "excluded": False}
    assert parse_target(both) == CursorTarget(Position(3, 4), 2, True)
    assert parse_target({"ledgerId": 3, "entryId": 4, "excluded": True}).excluded is True  # type: ignore[union-attr]
    assert parse_target(None, required=False) is None
    for bad in (
        "",
        {"ledgerId": 3, "entryId": -1},
        {"ledgerId": 2**63, "entryId": 0},
        {"ledgerId": 1, "entryId": 1, "batchIndex": None},
        {"ledgerId": 1, "entryId": 1, "batchIndex": 2**31},
        {"ledgerId": 1, "entryId": 1, "isExcluded": True, "excluded": "yes"},
        {"ledgerId": 1},
        [1, 2],
    ):
        with pytest.raises(InvalidArgument):
            parse_target(bad)
