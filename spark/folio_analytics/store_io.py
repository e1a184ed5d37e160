"""What the analytics service reads from etcd and the gateways (asyncio shell).

Owns: listing every topic partition's log (``list_logs``), its stored record,
its subscriptions' cursors, the owner's view of those subscriptions (one
admin ``stats`` call per partition that has subscriptions, to any live
gateway, bounded concurrency and timeout; a failure leaves the view empty),
the namespaces' policies, and which topics have a JSON or AVRO schema the
connector can decode (``decodable_topics``, docs/decisions/0010). Rule: keys
only through ``coordination.keys``; message data is never asked of a gateway;
writes go through ``fence``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from fastavro.schema import SchemaParseException
from pyspark_folio.decode import KINDS, TopicSchema, spark_type

from coordination import keys
from coordination.store import MetadataStore
from folio_analytics.assemble import GatewayView
from folio_analytics.job import PARTITION_SUFFIX, LogRef

STATS_CONCURRENCY = 8
STATS_TIMEOUT_S = 3.0


def _full_name(path: str) -> str:
    domain, rest = path.split("/", 1)
    return f"{domain}://{rest}"


async def list_logs(store: MetadataStore) -> list[LogRef]:
    """Every topic partition's log (partitions of a partitioned topic are the ``-partition-N`` logs)."""
    partitioned = {kv.key[len(keys.PARTITIONED) :] for kv in await store.list_prefix(keys.PARTITIONED)}
    logs = []
    for kv in await store.list_prefix(keys.MANAGED_LOGS):
        path = kv.key[len(keys.MANAGED_LOGS) :]
        try:
            state = orjson.loads(kv.value)
            ledgers = tuple(int(info["ledgerId"]) for info in state.get("ledgers", []))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
        base, _, index = path.rpartition(PARTITION_SUFFIX)
        if base and index.isdigit() and base in partitioned:
            logs.append(LogRef(path, _full_name(base), int(index), ledgers))
        elif path.count("/") == 3:
            logs.append(LogRef(path, _full_name(path), -1, ledgers))
    return logs


async def decodable_topics(store: MetadataStore, topics: set[str]) -> frozenset[str]:
    """The topics whose latest schema is JSON or AVRO with a record ``decode=true`` maps."""
    out = set()
    for topic in sorted(topics):
        kv = await store.get(keys.schemas(topic.replace("://", "/", 1)))
        try:
            latest = TopicSchema.parse(kv.value if kv else None).latest
            if latest is not None and latest.kind in KINDS:
                spark_type(latest.definition, latest.kind)
                out.add(topic)
        except (ValueError, KeyError, TypeError, SchemaParseException):
            continue  # no usable schema: its messages are profiled without their fields
    return frozenset(out)


async def namespace_policies(store: MetadataStore) -> dict[str, dict[str, Any]]:
    """Every namespace ``tenant/ns`` and its policies JSON."""
    out = {}
    for kv in await store.list_prefix(keys.NAMESPACES):
        name = kv.key[len(keys.NAMESPACES) :]
        with contextlib.suppress(orjson.JSONDecodeError):
            value = orjson.loads(kv.value)
            if name.count("/") == 1 and isinstance(value, dict):
                out[name] = value
    return out


async def read_json(store: MetadataStore, key: str) -> dict[str, Any] | None:
    kv = await store.get(key)
    if kv is None:
        return None
    try:
        value = orjson.loads(kv.value)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def cursors_of(store: MetadataStore, path: str) -> dict[str, dict[str, Any]]:
    prefix = keys.cursors_of(path)
    out = {}
    for kv in await store.list_prefix(prefix):
        with contextlib.suppress(orjson.JSONDecodeError):
            out[kv.key[len(prefix) :]] = orjson.loads(kv.value)
    return out


async def gateway_urls(store: MetadataStore) -> list[str]:
    urls = []
    for kv in await store.list_prefix(keys.GATEWAYS):
        with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError):
            urls.append(str(orjson.loads(kv.value)["httpUrl"]))
    return urls


async def owner_views(urls: list[str], paths: list[str]) -> dict[str, dict[str, GatewayView]]:
    """Per log path, its subscriptions as the topic's owner reports them."""
    out: dict[str, dict[str, GatewayView]] = {}
    if not urls or not paths:
        return out
    gate = asyncio.Semaphore(STATS_CONCURRENCY)
    async with httpx.AsyncClient(timeout=STATS_TIMEOUT_S, follow_redirects=True) as client:

        async def one(i: int, path: str) -> None:
            segments = "/".join(quote(p, safe="") for p in path.split("/"))
            async with gate:
                try:
                    response = await client.get(f"{urls[i % len(urls)]}/admin/v2/{segments}/stats")
                    if response.status_code != 200:
                        return
                    subs = response.json().get("subscriptions") or {}
                except (httpx.HTTPError, ValueError, AttributeError):
                    return
            out[path] = {
                name: GatewayView.from_stats(sub) for name, sub in subs.items() if isinstance(sub, dict)
            }

        await asyncio.gather(*(one(i, p) for i, p in enumerate(paths)))
    return out
