"""The admin request bodies' JSON Schemas say exactly what their pure parsers accept.

For each admin operation with a body, schemathesis generates bodies from the
generated OpenAPI document - fitting the schema and not - and a JSON Schema
validator (jsonschema, Draft 2020-12, against the document's components)
decides which fit. Each body goes through the admin body reader
(``admin_common.decode_json``) and the route's parser: a body that fits must be
accepted, one that does not must be refused with a 400-class error. The only
refusals of a fitting body allowed are the ones the schemas' descriptions name
because JSON Schema cannot state them: a backlog quota beyond the retention
(412) and bundle boundaries out of order or not matching ``numBundles`` (400).
(Persistence quorums out of order are stated, with ``dependentSchemas``.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, get_args

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from schemathesis.core import NOT_SET
from schemathesis.generation import GenerationMode

from gateway.api.admin_bodies import parse_target
from gateway.api.admin_common import decode_json
from gateway.api.admin_models import Action, QuotaPolicy, QuotaType, TopicType
from gateway.api.openapi_spec import spec
from gateway.errors import GatewayError
from gateway.meta.errors import PreconditionFailed
from gateway.meta.persistence import Persistence
from gateway.meta.policies import (
    AUTH_ACTIONS,
    BACKLOG_QUOTA_POLICIES,
    BACKLOG_QUOTA_TYPES,
    TOPIC_TYPES,
    AutoTopicCreation,
    BacklogQuota,
    Policies,
    Retention,
    parse_actions,
    parse_analytics_interval,
    parse_enabled,
    parse_limit,
    parse_strategy,
    parse_ttl_seconds,
)
from gateway.meta.policy_fields import bool_field
from gateway.meta.tenant_info import TenantInfo
from gateway.protocol.webhook_config import parse_webhook

pytestmark = pytest.mark.unit

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
SUB = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{subscription}"
# refusals of a schema-valid Policies body that JSON Schema cannot state (documented)
EXAMPLES = 30  # per operation and mode (300 found nothing more when this was written)
UNSTATED = ("bundles.boundaries must", "bundles.numBundles is")


def _required_target(value: Any) -> Any:
    return parse_target(value, required=True)


def _optional_target(value: Any) -> Any:
    return parse_target(value, required=False)


# (method, path) -> the parser of its body
PARSERS: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("PUT", "/admin/v2/tenants/{tenant}"): TenantInfo.from_json,
    ("POST", "/admin/v2/tenants/{tenant}"): TenantInfo.from_json,
    ("PUT", NS): Policies.from_json,
    ("POST", f"{NS}/permissions/{{role}}"): parse_actions,
    ("POST", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions/{role}"): parse_actions,
    ("POST", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/permissions/{role}"): parse_actions,
    ("POST", f"{NS}/retention"): Retention.from_json,
    ("POST", f"{NS}/messageTTL"): parse_ttl_seconds,
    ("POST", f"{NS}/deduplication"): lambda v: parse_enabled(v, "deduplication"),
    ("POST", f"{NS}/maxConsumersPerSubscription"): lambda v: parse_limit(v, "maxConsumersPerSubscription"),
    ("POST", f"{NS}/maxProducersPerTopic"): lambda v: parse_limit(v, "maxProducersPerTopic"),
    ("POST", f"{NS}/maxConsumersPerTopic"): lambda v: parse_limit(v, "maxConsumersPerTopic"),
    ("POST", f"{NS}/maxSubscriptionsPerTopic"): lambda v: parse_limit(v, "maxSubscriptionsPerTopic"),
    ("POST", f"{NS}/maxTopicsPerNamespace"): lambda v: parse_limit(v, "maxTopicsPerNamespace"),
    ("POST", f"{NS}/autoTopicCreation"): AutoTopicCreation.from_json,
    ("POST", f"{NS}/backlogQuota"): BacklogQuota.from_json,
    ("POST", f"{NS}/persistence"): Persistence.from_json,
    ("PUT", SUB): _optional_target,
    ("POST", f"{SUB}/expireMessages"): _required_target,
    ("POST", f"{SUB}/resetcursor"): _required_target,
    ("PUT", f"{SUB}/webhook"): parse_webhook,
    ("POST", f"{NS}/schemaCompatibilityStrategy"): parse_strategy,
    ("PUT", f"{NS}/schemaCompatibilityStrategy"): parse_strategy,
    ("POST", f"{NS}/isAllowAutoUpdateSchema"): lambda v: bool_field(v, "isAllowAutoUpdateSchema"),
    ("POST", f"{NS}/analyticsInterval"): parse_analytics_interval,
}

# Bodies read by hand that no JSON schema can describe whole: a schema definition is an
# Avro record inside a string (its parser is tested in tests/unit/test_schema_core.py).
SCHEMA_DEFINITIONS = {
    (m, f"/admin/v2/schemas/{{tenant}}/{{namespace}}/{{topic}}/{path}")
    for m, path in (("POST", "schema"), ("POST", "compatibility"))
}
# Bodies FastAPI validates with their pydantic models, not read by hand.
MODEL_BODIES = {("POST", "/admin/v2/analytics/sql"), ("PUT", "/admin/v2/analytics/settings")}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return spec()


@pytest.fixture(scope="module")
def api(document: dict[str, Any]) -> Any:
    """The document's body operations only, without their parameters: only bodies vary."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path in PARSERS:
        operation = document["paths"][path][method.lower()]
        kept = {"requestBody": operation["requestBody"], "responses": operation["responses"]}
        paths.setdefault(path, {})[method.lower()] = kept
    return schemathesis.openapi.from_dict({**document, "paths": paths})


def body_validator(document: dict[str, Any], method: str, path: str) -> tuple[Draft202012Validator, bool]:
    body = document["paths"][path][method.lower()]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    root = {**schema, "components": document["components"]}
    return Draft202012Validator(root), bool(body["required"])


def test_every_hand_read_admin_body_is_covered(document: dict[str, Any]) -> None:
    with_body = {
        (method.upper(), path)
        for path, methods in document["paths"].items()
        if path.startswith("/admin/")
        for method, op in methods.items()
        if "requestBody" in op
    }
    partitions = {
        (m, "/admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions") for m in ("PUT", "POST")
    }
    assert with_body == set(PARSERS) | partitions | SCHEMA_DEFINITIONS | MODEL_BODIES


def test_literal_types_are_the_parsers_choices() -> None:
    assert get_args(QuotaType) == BACKLOG_QUOTA_TYPES
    assert get_args(QuotaPolicy) == BACKLOG_QUOTA_POLICIES
    assert get_args(TopicType) == TOPIC_TYPES
    assert get_args(Action) == AUTH_ACTIONS


def raw_body(body: Any) -> bytes:
    """The bytes schemathesis would send for ``body`` (negative cases may be raw bytes)."""
    if body is NOT_SET:
        return b""
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def fits(validator: Draft202012Validator, raw: bytes, required: bool) -> bool:
    """Whether the body the server reads from ``raw`` is valid by the schema."""
    if not raw.strip():
        return not required
    try:
        value = json.loads(raw)
    except ValueError:
        return False
    return bool(validator.is_valid(value))


def outcome(parse: Callable[[Any], Any], raw: bytes, required: bool) -> str:
    """``accepted``, ``precondition`` (412) or the 400-class refusal's reason."""
    try:
        value = decode_json(raw, required=required)
        if value is not None or required:
            parse(value)
    except PreconditionFailed:
        return "precondition"
    except GatewayError as exc:
        assert exc.code in ("invalid_argument", "invalid_policy", "bad_request"), exc.code
        return str(exc)
    return "accepted"


@pytest.mark.parametrize(("method", "path"), sorted(PARSERS))
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_schema_fits_parser(
    document: dict[str, Any], api: Any, method: str, path: str, mode: GenerationMode
) -> None:
    validator, required = body_validator(document, method, path)
    parse = PARSERS[(method, path)]
    strategy = api[path][method].as_strategy(generation_mode=mode)

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        raw = raw_body(data.draw(strategy).body)
        result = outcome(parse, raw, required)
        if fits(validator, raw, required):
            allowed = result == "accepted" or (
                path == NS and (result == "precondition" or result.startswith(UNSTATED))
            )
            assert allowed, f"schema-valid body refused: {raw!r} -> {result}"
        else:
            assert result != "accepted", f"schema-invalid body accepted: {raw!r}"

    check()
