"""A Python client generated from the committed openapi/openapi.json drives a live cluster.

``openapi-python-client generate --meta none`` (offline, ~1 s) writes a package
into a temp dir; the test imports it and, against 2 real gateways over 3 real
storage nodes, creates a namespace and a topic, publishes JSON (text and
base64) and a raw binary body (``File``), reads topic stats, creates a
subscription, peeks and browses its messages, consumes and acks them over the
HTTP consume API, and resets the cursor by time - checking every value the
client parsed, including ``ErrorBody`` on a 404 and a 400. The generator must
report no warnings: a warning means part of the API is missing from clients.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import io
import os
import pkgutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from clusters import MessagingCluster

pytestmark = pytest.mark.component

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "openapi" / "openapi.json"
VENV_BIN = ROOT / ".venv" / "bin"
PACKAGE = "folio_generated_client"

# operation ids of every call the test makes (a module in the package of the operation's tag)
CALLS = [
    "create_namespace",
    "create_topic",
    "produce",
    "get_topic_stats",
    "create_subscription",
    "peek_nth_message",
    "browse_subscription_messages",
    "reset_cursor",
    "fetch",
    "ack",
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    out = tmp_path_factory.mktemp("generated")
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [str(VENV_BIN / "openapi-python-client"), "generate", "--path", str(SPEC), "--meta", "none"]
    done = subprocess.run(
        [*command, "--output-path", str(out / PACKAGE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))


def operations(package: ModuleType) -> dict[str, ModuleType]:
    """Every generated operation module by operation id (``api/<tag>/<operation id>.py``)."""
    api = importlib.import_module(f"{package.__name__}.api")
    found: dict[str, ModuleType] = {}
    for tag in pkgutil.iter_modules(api.__path__):
        tag_package = importlib.import_module(f"{api.__name__}.{tag.name}")
        for module in pkgutil.iter_modules(tag_package.__path__):
            found[module.name] = importlib.import_module(f"{tag_package.__name__}.{module.name}")
    return found


def test_generated_client_has_every_operation_the_test_uses(generated: ModuleType) -> None:
    available = operations(generated)
    missing = [name for name in CALLS if name not in available]
    assert not missing, f"operations not in openapi/openapi.json: {missing}"
    assert len(available) > 40


async def test_generated_client_against_a_live_cluster(
    generated: ModuleType, messaging_cluster: Callable[..., Awaitable[MessagingCluster]]
) -> None:
    cluster = await messaging_cluster(gateways=2, nodes=3)
    client_module = importlib.import_module(f"{PACKAGE}.client")
    types = importlib.import_module(f"{PACKAGE}.types")
    models = importlib.import_module(f"{PACKAGE}.models")
    clients = [client_module.Client(base_url=url, timeout=30.0) for url in cluster.urls]
    available = operations(generated)
    assert not [name for name in CALLS if name not in available], "see the test above"
    op: dict[str, Any] = {name: available[name] for name in CALLS}
    persistent = models.ProduceDomain.PERSISTENT
    ns, topic, sub = "generated", "gen-topic", "gen-sub"

    async def call(name: str, gateway: int = 0, **kwargs: Any) -> Any:
        return await asyncio.to_thread(op[name].sync_detailed, client=clients[gateway], **kwargs)

    created = await call("create_namespace", tenant="public", namespace=ns)
    assert created.status_code == 204, created.content
    created = await call("create_topic", 1, tenant="public", namespace=ns, topic=topic)
    assert created.status_code == 204, created.content

    # publish: JSON text + base64 through gateway 0, a raw binary body through gateway 1
    body = models.ProducerMessages(
        producer_name="generated",
        messages=[
            models.TextMessage(payload="hello", key="k1"),
            models.Base64Message(
                payload=base64.b64encode(b"\x00\x01bin").decode(),
                payload_encoding="base64",
            ),
        ],
    )
    published = await call(
        "produce", domain=persistent, tenant="public", namespace=ns, topic=topic, body=body
    )
    assert published.status_code == 200, published.content
    acks = published.parsed
    assert isinstance(acks, models.ProducerAcks), acks
    assert [r.error_code for r in acks.message_publish_results] == [0, 0]
    ids = [r.message_id.split(":") for r in acks.message_publish_results]
    assert all(len(i) in (3, 4) and i[2] == "-1" for i in ids), ids  # L:E:P[:B], not partitioned
    raw = types.File(payload=io.BytesIO(b"\xffraw\x00"), mime_type="application/octet-stream")
    published = await call(
        "produce", 1, domain=persistent, tenant="public", namespace=ns, topic=topic, body=raw,
        x_pulsar_partition_key="k2",
    )  # fmt: skip
    assert published.status_code == 200, published.content
    assert isinstance(published.parsed, models.ProducerAck) and published.parsed.error_code == 0

    stats = await call("get_topic_stats", tenant="public", namespace=ns, topic=topic)
    assert stats.status_code == 200, stats.content
    stats_json = orjson.loads(stats.content)
    assert stats_json["msgInCounter"] == 3, stats_json
    # typed: the client parses TopicStats into an object, not a dict
    assert isinstance(stats.parsed, models.TopicStats), type(stats.parsed)
    assert stats.parsed.msg_in_counter == 3 and stats.parsed.deduplication_status == "Disabled"
    assert stats.parsed.publishers == [] and isinstance(stats.parsed.compaction, models.CompactionStats)

    # a subscription from the earliest message: peek, browse, consume, reset by time
    created = await call(
        "create_subscription",
        1,
        tenant="public",
        namespace=ns,
        topic=topic,
        subscription=sub,
        body="earliest",
    )
    assert created.status_code == 204, created.content
    peeked = await call("peek_nth_message", tenant="public", namespace=ns, topic=topic, subscription=sub, n=1)
    assert peeked.status_code == 200, peeked.content
    assert peeked.content == b"hello"
    browsed = await call(
        "browse_subscription_messages", tenant="public", namespace=ns, topic=topic, subscription=sub
    )
    assert browsed.status_code == 200, browsed.content
    page = orjson.loads(browsed.content)
    assert page["total"] == 3 and len(page["messages"]) == 3, page

    fetched = await call(
        "fetch", domain=models.FetchDomain.PERSISTENT, tenant="public", namespace=ns, topic=topic,
        subscription=sub, max_=10, wait_ms=5000,
    )  # fmt: skip
    assert fetched.status_code == 200, fetched.content
    messages = fetched.parsed.messages
    payloads = [base64.b64decode(m.payload) for m in messages]
    assert payloads == [b"hello", b"\x00\x01bin", b"\xffraw\x00"]
    assert messages[0].key == "k1" and messages[2].key == "k2"
    # compared as times, not strings: Pulsar's format trims the millis ("…12.1Z" is after "…12.134Z"
    # as a string), so a string min() picked the later entry in about 1 of 15 runs
    times = [datetime.fromisoformat(m.publish_time.replace("Z", "+00:00")) for m in messages]
    since = int(min(times).timestamp() * 1000)
    acked = await call(
        "ack", domain=models.AckDomain.PERSISTENT, tenant="public", namespace=ns, topic=topic,
        subscription=sub, body=models.AckRequest(message_ids=[m.message_id for m in messages]),
    )  # fmt: skip
    assert acked.status_code == 200 and acked.parsed.acked == 3, acked.content
    browsed = await call(
        "browse_subscription_messages", tenant="public", namespace=ns, topic=topic, subscription=sub
    )
    assert orjson.loads(browsed.content)["total"] == 0

    reset = await call(
        "reset_cursor", 1, tenant="public", namespace=ns, topic=topic, subscription=sub, timestamp=since
    )
    assert reset.status_code == 204, reset.content
    browsed = await call(
        "browse_subscription_messages", tenant="public", namespace=ns, topic=topic, subscription=sub
    )
    assert orjson.loads(browsed.content)["total"] == 3

    # errors parse into the one ErrorBody model
    missing = await call("get_topic_stats", tenant="public", namespace=ns, topic="no-such-topic")
    assert missing.status_code == 404
    assert isinstance(missing.parsed, models.ErrorBody) and missing.parsed.code == "not_found"
    invalid = await call(
        "fetch", domain=models.FetchDomain.PERSISTENT, tenant="public", namespace=ns, topic=topic,
        subscription=sub, max_=0,
    )  # fmt: skip
    assert invalid.status_code == 400
    assert isinstance(invalid.parsed, models.ErrorBody) and "max" in invalid.parsed.reason
    for client in clients:
        client.get_httpx_client().close()
