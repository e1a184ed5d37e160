"""Pulsar's admin schema API: a topic's schema versions, read, added, checked, deleted.

Owns: the HTTP shape of ``/admin/v2/schemas/{tenant}/{namespace}/{topic}/…``:
``GET schema`` (the latest), ``GET schema/{version}``, ``GET schemas`` (every
live version; 404 when none, as Pulsar) and ``GET versions`` (the same, but an
empty list when none - Folio's, for pages that show "no schema"), ``POST schema`` (add a
``PostSchemaPayload``), ``POST compatibility`` (would it be accepted?) and
``DELETE schema`` (a tombstone version). Rules (docs/decisions/0010-schema-registry.md):
- any gateway answers from etcd (``SchemaRegistry``); no topic is loaded or
  created, and a partition's schema is its partitioned topic's;
- the namespace's ``schemaCompatibilityStrategy`` decides what may follow
  (UNDEFINED = FULL); a refused schema is 409 ``incompatible_schema``, a bad
  one 400 ``invalid_schema``, a missing one 404 ``schema_not_found``;
- replies are Pulsar's ``GetSchemaResponse``, ``GetAllVersionsSchemaResponse``,
  ``PostSchemaResponse``, ``IsCompatibilityResponse`` and ``DeleteSchemaResponse``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, Field

from gateway.api import errors
from gateway.api.admin_common import AdminRoute, TopicPath, read_json
from gateway.api.admin_models import INT64_MAX, request_body
from gateway.meta.schema_compat import Strategy
from gateway.meta.schema_registry import SchemaNotFound
from gateway.meta.schema_types import SchemaInfo, SchemaType, parse_post_schema
from gateway.names import TopicName

if TYPE_CHECKING:
    from gateway.process import Gateway

TAGS: list[str | Any] = ["admin-schemas"]
S = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"


async def _version(
    version: Annotated[int, Path(ge=0, le=INT64_MAX, description="a schema version (0, 1, ...)")],
) -> int:
    return version


# a dependency as ``TopicPath`` is, so that OpenAPI lists it after the topic's parameters
Version = Annotated[int, Depends(_version)]
Authoritative = Annotated[bool, Query(description="accepted for Pulsar clients; any gateway answers")]
SCHEMA_TYPES = [t.value for t in SchemaType]
READ = errors.responses(404, 412)


class GetSchemaResponse(BaseModel):
    version: int = Field(description="the version, from 0")
    type: str = Field(description=f"one of {', '.join(SCHEMA_TYPES)}")
    timestamp: int = Field(description="when it was added, epoch ms")
    data: str = Field(description="the definition (an Avro record for JSON and AVRO; empty for others)")
    properties: dict[str, str]


class GetAllVersionsSchemaResponse(BaseModel):
    getSchemaResponses: list[GetSchemaResponse]


class SchemaVersionBody(BaseModel):
    version: int


class PostSchemaResponse(BaseModel):
    version: SchemaVersionBody


class IsCompatibilityResponse(BaseModel):
    isCompatible: bool
    schemaCompatibilityStrategy: str


class DeleteSchemaResponse(BaseModel):
    version: int = Field(description="the version of the tombstone")


POST_SCHEMA_PAYLOAD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"enum": SCHEMA_TYPES},
        "schema": {"type": "string", "description": "the Avro record definition (JSON, AVRO); '' else"},
        "properties": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["type"],
}
_EXAMPLE = {
    "type": "JSON",
    "schema": '{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}',
    "properties": {},
}


def make_router(get_gateway: Callable[[], Gateway]) -> APIRouter:
    router = APIRouter(tags=TAGS, route_class=AdminRoute)

    @router.get(f"{S}/schema", summary="The topic's latest schema", responses=errors.responses(404, 412))
    async def get_schema(name: TopicPath) -> GetSchemaResponse:
        latest = await get_gateway().schemas.latest(name)
        return GetSchemaResponse(**latest.response())

    @router.get(f"{S}/schema/{{version}}", summary="One version of the topic's schema", responses=READ)
    async def get_schema_version(name: TopicPath, version: Version) -> GetSchemaResponse:
        stored = await get_gateway().schemas.version(name, version)
        return GetSchemaResponse(**stored.response())

    async def all_versions(name: TopicName) -> list[GetSchemaResponse]:
        versions = await get_gateway().schemas.versions(name)
        return [GetSchemaResponse(**v.response()) for v in versions if not v.deleted]

    @router.get(f"{S}/schemas", summary="Every version of the topic's schema", responses=READ)
    async def get_all_schemas(name: TopicPath) -> GetAllVersionsSchemaResponse:
        live = await all_versions(name)
        if not live:  # Pulsar's answer for a topic without a schema
            raise SchemaNotFound(f"Schema not found for {name}")
        return GetAllVersionsSchemaResponse(getSchemaResponses=live)

    @router.get(
        f"{S}/versions",
        summary="Every live version of the topic's schema; an empty list when it has none (Folio)",
        responses=errors.responses(412),
    )
    async def get_versions(name: TopicPath) -> GetAllVersionsSchemaResponse:
        return GetAllVersionsSchemaResponse(getSchemaResponses=await all_versions(name))

    async def proposed(gateway: Gateway, name: TopicName, request: Request) -> tuple[SchemaInfo, Strategy]:
        """The ``PostSchemaPayload`` in ``request`` and the strategy that judges it
        (the namespace's of topic ``name``)."""
        info = parse_post_schema(await read_json(request))
        policies = await gateway.namespaces.get_policies(name.namespace_name)
        return info, policies.schema_compatibility_strategy

    @router.post(
        f"{S}/schema",
        summary="Add a schema version (409 if the namespace's strategy refuses it)",
        responses=errors.responses(400, 404, 409, 412),
        openapi_extra=request_body(POST_SCHEMA_PAYLOAD, "Pulsar PostSchemaPayload", _EXAMPLE),
    )
    async def post_schema(name: TopicPath, request: Request) -> PostSchemaResponse:
        gateway = get_gateway()
        info, strategy = await proposed(gateway, name, request)
        version = await gateway.schemas.add(name, info, strategy, gateway.clock.now_ms())
        return PostSchemaResponse(version=SchemaVersionBody(version=version))

    @router.post(
        f"{S}/compatibility",
        summary="Would this schema be accepted as the next version?",
        responses=errors.responses(400, 404, 412),
        openapi_extra=request_body(POST_SCHEMA_PAYLOAD, "Pulsar PostSchemaPayload", _EXAMPLE),
    )
    async def test_compatibility(name: TopicPath, request: Request) -> IsCompatibilityResponse:
        gateway = get_gateway()
        info, strategy = await proposed(gateway, name, request)
        compatible = await gateway.schemas.check(name, info, strategy)
        return IsCompatibilityResponse(isCompatible=compatible, schemaCompatibilityStrategy=strategy.value)

    @router.delete(
        f"{S}/schema",
        summary="Delete the schema (a tombstone version; the next schema starts afresh)",
        responses=errors.responses(404, 412),
    )
    async def delete_schema(
        name: TopicPath,
        force: Annotated[bool, Query(description="accepted for Pulsar clients")] = False,
        authoritative: Authoritative = False,
    ) -> DeleteSchemaResponse:
        gateway = get_gateway()
        version = await gateway.schemas.delete(name, gateway.clock.now_ms())
        return DeleteSchemaResponse(version=version)

    return router
