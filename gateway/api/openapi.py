"""The shape of the gateway's OpenAPI document: what the app declares about itself.

Owns: the tag list, the operation-id rule and the clean-up applied to FastAPI's
output (``install`` makes the app serve the cleaned document). The document
itself is generated from the app by ``gateway.api.openapi_spec``, which imports
the app; this module does not. Rules:
- an operation id is the route function's name (unique across the app), so
  generated clients get ``produce``, ``get_topic_stats``... not
  ``produce_topics__domain__..._post``;
- no operation declares FastAPI's 422 ``HTTPValidationError``: request
  validation is answered 400 with ``ErrorBody`` (app.py installs the
  handler), so every operation that had a 422 declares a 400 ``ErrorBody``;
- request bodies the routes parse by hand are documented by the models in
  ``gateway.api.messaging_models`` (added to ``components.schemas`` here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from gateway.api.errors import ErrorBody
from gateway.api.messaging_models import REQUEST_MODELS

if TYPE_CHECKING:
    from fastapi import FastAPI

REF = "#/components/schemas/{model}"
ERROR_REF = {"$ref": REF.format(model="ErrorBody")}

TAGS: list[dict[str, str]] = [
    {"name": "produce", "description": "Publish over HTTP (Pulsar REST producer, PIP-64) and raw bodies."},
    {"name": "consume", "description": "Consume over HTTP: long-poll fetch, ack, nack (Folio)."},
    {"name": "lookup", "description": "Which gateway serves a topic (Pulsar lookup v2)."},
    {"name": "health", "description": "Liveness of this gateway."},
    {"name": "admin-tenants", "description": "Pulsar admin v2: tenants."},
    {"name": "admin-namespaces", "description": "Pulsar admin v2: namespaces and their policies."},
    {"name": "admin-topics", "description": "Pulsar admin v2: topics, partitions, stats, peek."},
    {"name": "admin-schemas", "description": "Pulsar admin v2: topic schema versions."},
    {"name": "admin-subscriptions", "description": "Pulsar admin v2: subscriptions and their cursors."},
    {"name": "admin-cluster", "description": "Gateways (brokers), storage nodes and the cluster overview."},
    {
        "name": "admin-analytics",
        "description": "Topic statistics computed by Spark from the log, runs and SQL over topics.",
    },
]


def operation_id(route: APIRoute) -> str:
    """The OpenAPI operation id of ``route``: its function's name."""
    return route.name


def clean(document: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's document without 422s and with the hand-parsed bodies' models (in place)."""
    for methods in document.get("paths", {}).values():
        for operation in methods.values():
            responses = operation.get("responses", {})
            if responses.pop("422", None) is not None and "400" not in responses:
                responses["400"] = {
                    "description": "Bad request",
                    "content": {"application/json": {"schema": ERROR_REF}},
                }
            operation["responses"] = dict(sorted(responses.items()))
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    models: list[type[BaseModel]] = [*REQUEST_MODELS, ErrorBody]
    _, extra = models_json_schema([(model, "validation") for model in models], ref_template=REF)
    for name, schema in extra.get("$defs", {}).items():
        schemas.setdefault(name, schema)
    document["components"]["schemas"] = dict(sorted(schemas.items()))
    return document


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` return the cleaned document (built once, then cached)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = clean(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
