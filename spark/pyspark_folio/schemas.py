"""Topic schemas for ``decode=true``, read from etcd (asyncio I/O).

Owns: ``plan_decode`` (on the driver: the one schema every selected topic has
now, as a ``DecodeSpec``) and ``read_topic_schema`` (in a task: every version of
one topic, one etcd read). Rules: versions live under
``coordination.keys.schemas(<base topic path>)`` (docs/decisions/0010-schema-registry.md),
read directly, never through a gateway; decode=true needs each selected topic
to have a live JSON or AVRO schema, and all of them the same one, else a
``ValueError`` naming the topic.
"""

from __future__ import annotations

import asyncio

from coordination import keys
from coordination.etcd_store import EtcdStore
from pyspark_folio.decode import KINDS, DecodeSpec, TopicSchema, spark_type
from pyspark_folio.logs import open_client, selected_logs
from pyspark_folio.names import path_of
from pyspark_folio.options import ReadOptions


async def read_topic_schema(store: EtcdStore, topic: str) -> TopicSchema:
    """Every stored version of ``topic`` (a partition's base topic name)."""
    kv = await store.get(keys.schemas(path_of(topic)))
    return TopicSchema.parse(kv.value if kv else None)


async def _plan(options: ReadOptions) -> DecodeSpec:
    async with open_client(options.connection) as (store, _):
        topics = sorted({tp.topic for tp, _ in await selected_logs(store, options)})
        if not topics:
            raise ValueError("decode=true: no topic selected")
        schemas = await asyncio.gather(*(read_topic_schema(store, t) for t in topics))
    specs: list[DecodeSpec] = []
    for topic, schema in zip(topics, schemas, strict=True):
        latest = schema.latest
        if latest is None:
            raise ValueError(f"decode=true: topic {topic} has no schema")
        if latest.kind not in KINDS:
            raise ValueError(f"decode=true: topic {topic} has a {latest.kind} schema, not JSON or AVRO")
        try:
            struct = spark_type(latest.definition, latest.kind)
        except ValueError as exc:
            raise ValueError(f"decode=true: topic {topic}: {exc}") from exc
        spec = DecodeSpec(latest.kind, latest.definition, struct)
        if specs and not specs[0].same_as(spec):
            raise ValueError(
                f"decode=true: topics {topics[0]} and {topic} have different schemas; read them separately"
            )
        specs.append(spec)
    return specs[0]


def plan_decode(options: ReadOptions) -> DecodeSpec:
    """The schema the ``decoded`` column follows (runs on the driver)."""
    return asyncio.run(_plan(options))
