"""schemathesis in-process against the real app: every documented operation, every check.

The app is ``create_app(Gateway(...))`` on a real etcd (the session's) and 3
real storage-node processes; schemathesis loads ``/openapi.json`` from it over
ASGI (its lifespan starts the gateway once) and, per operation, sends
generated valid and invalid requests (seeded, few examples each) and runs all
checks of ``case.call_and_validate()``: no 5xx, declared status codes and
content types, responses conforming to their schemas, valid data accepted,
invalid data refused, and so on.

Configuration, each for a reason:
- ``412`` counts as a refusal of invalid data: Pulsar (and Folio) answer an
  invalid tenant/namespace/topic/subscription name with 412 Precondition Failed.
- strings are generated in ASCII: names (producer, consumer) are documented as printable
  ASCII, which the gateway accepts; it also accepts other printable Unicode, which a
  JSON Schema pattern cannot say without listing Unicode's categories.
- the long-poll ``fetch`` gets ``waitMs`` of at most 100 ms when the generated
  value was valid (an idle subscription would otherwise hold each call for up
  to 60 s); a generated invalid ``waitMs`` is left as it is. Likewise the
  event ``stream`` gets a ``durationMs`` of at most 100 ms (0 would stream
  until the client goes).
- ``POST /admin/v2/analytics/sql`` is answered 503 (declared) because no
  ``folio analytics`` service runs here: the no-5xx check is off for it alone.
- a topic schema's definition, and the REST producer's ``keySchema`` / ``valueSchema``, are
  Avro JSON inside a string, and with a ``valueSchema`` each payload must fit it: JSON Schema
  cannot state either, so for a case that carries one (the admin schema POSTs with a JSON or
  AVRO type, a publish naming a schema) the check that schema-valid data is accepted is off;
  every other check - the declared status codes among them - still runs.
- a webhook's ``url`` is refused 400 when its host is no public address (the cluster's
  own ports, loopback where not allowed, link-local, ``0``...), which depends on what
  the host resolves to: the same check is off for a case that sets a webhook.
- a message search whose ``before`` is not later than its ``after`` is refused 400 (an
  empty time range is a mistake worth a sentence), which JSON Schema cannot state
  across two parameters: the same check is off for such a case.
Excluded operations: none. (WebSocket routes are not in the OpenAPI document.)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from clusters import LedgerCluster
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import positive_data_acceptance

from coordination.etcd_store import EtcdStore, connect, parse_endpoints
from gateway.api.app import create_app
from gateway.process import Gateway, GatewayConfig

pytestmark = pytest.mark.component

WAIT_MS_MAX = 100
CONFIG = """
seed = 20240611
[generation]
codec = "ascii"
max-examples = 4
no-shrink = true
[checks.negative_data_rejection]
expected-statuses = ["400", "404", "405", "409", "412", "413", "415", "429", "5xx"]
"""


@pytest.fixture(scope="module")
def api_schema(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    namespace = f"/schemathesis-{os.getpid()}"
    ledgers = LedgerCluster(etcd_endpoint, namespace, tmp_path_factory.mktemp("schemathesis"))
    asyncio.run(ledgers.add_nodes(3))
    # the store connects lazily, inside the event loop schemathesis runs the app on
    store = EtcdStore(parse_endpoints(etcd_endpoint), namespace=namespace)
    gateway = Gateway(store, GatewayConfig(gateway_id="schemathesis", http_url="http://127.0.0.1:1"))
    app = create_app(gateway)
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", app, config=SchemathesisConfig.from_str(CONFIG))
    finally:
        from schemathesis.python import asgi

        asgi.shutdown_lifespans()
        for node in ledgers.nodes:
            node.stop()

        async def cleanup() -> None:
            admin = await connect(etcd_endpoint, namespace=namespace)
            try:
                await admin.delete_prefix("")
            finally:
                await admin.close()

        asyncio.run(cleanup())


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32's lazy-schema plugin reads ``node._nodeid``, which pytest 9 no longer
    sets on test functions; give it the public ``nodeid``."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


def bound_long_poll(case: Any) -> None:
    if case.operation.path == "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}/stream":
        bound_stream(case)
    if case.operation.path != "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}":
        return
    query = dict(case.query or {})
    wait = query.get("waitMs", 5000)
    if isinstance(wait, str) and wait.isascii() and wait.isdigit():
        wait = int(wait)
    if type(wait) is int and 0 <= wait <= 60_000:
        query["waitMs"] = min(wait, WAIT_MS_MAX)
        case.query = query


def bound_stream(case: Any) -> None:
    """A valid ``durationMs`` (0 = until the client goes) becomes at most WAIT_MS_MAX."""
    query = dict(case.query or {})
    duration = query.get("durationMs", 0)
    if isinstance(duration, str) and duration.isascii() and duration.isdigit():
        duration = int(duration)
    if type(duration) is int and 0 <= duration <= 86_400_000:
        query["durationMs"] = min(duration, WAIT_MS_MAX) or WAIT_MS_MAX
        case.query = query


def carries_a_schema(case: Any) -> bool:
    """A body whose acceptance depends on Avro JSON inside a string (see the module docstring)."""
    body = case.body if isinstance(case.body, dict) else {}
    if case.operation.path.startswith("/admin/v2/schemas/"):
        return str(body.get("type", "")).upper() in ("JSON", "AVRO")
    return case.operation.path.startswith("/topics/") and any(
        body.get(field) is not None for field in ("keySchema", "valueSchema", "schemaVersion")
    )


def an_empty_time_range(case: Any) -> bool:
    """A search whose ``before`` is at or before its ``after`` (module docstring)."""
    query = case.query if isinstance(case.query, dict) else {}
    bounds = [str(query.get(name, "")) for name in ("after", "before")]
    if not case.operation.path.endswith("/search") or not all(b.isascii() and b.isdigit() for b in bounds):
        return False
    return int(bounds[1]) <= int(bounds[0])


def sets_a_webhook(case: Any) -> bool:
    """A webhook whose acceptance depends on where its URL's host points (module docstring)."""
    return case.operation.path.endswith("/webhook") and case.method.upper() in ("PUT", "POST")


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms(case: Any) -> None:
    bound_long_poll(case)
    if case.operation.path == "/admin/v2/analytics/sql" and case.method.upper() == "POST":
        case.call_and_validate(excluded_checks=[schemathesis.checks.not_a_server_error])
    elif carries_a_schema(case) or sets_a_webhook(case) or an_empty_time_range(case):
        case.call_and_validate(excluded_checks=[positive_data_acceptance])
    else:
        case.call_and_validate()
