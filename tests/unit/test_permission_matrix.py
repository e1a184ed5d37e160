"""The permission matrix: every route and WebSocket endpoint of the app x role x resource.

The routes come from the app's own route table (``create_app``), so a new route
cannot escape: it must have a rule in ``gateway.security.rules`` (else the test
fails) and an expectation here. Each cell sends one request through the real
security middleware, the real ``Guard`` and the real rule table, over metadata
in a store (tenants ``ta``/``tb`` with admin roles ``admin-a``/``admin-b``,
grants on ``ta/ns``, topic grants on ``ta/ns``'s partitioned topic ``p``); behind
the middleware a terminal app records that the request got through. Roles:
anonymous, consume-only, produce-only, produce+consume, a role granted
produce+consume on topic ``p`` only (and produce on its webhook's dead-letter
topic), tenant admin of A, tenant admin of B, superuser. Resources: tenant A and
B, a plain topic, a partitioned topic and one of its partitions, persistent and
non-persistent. The control removes one check (skip_all asks
only for LOOKUP) and must see exactly the cells that change.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from coordination.clock import SystemClock
from coordination.memory_store import MemoryStore
from gateway.api.app import create_app
from gateway.meta.policies import Policies
from gateway.meta.tenant_info import TenantInfo
from gateway.names import NamespaceName
from gateway.process import Gateway, GatewayConfig
from gateway.security import rules
from gateway.security.guard import SecurityConfig
from gateway.security.middleware import SecurityMiddleware
from gateway.security.policy import Need
from gateway.security.tokens import Algorithm, TokenRules, mint

pytestmark = pytest.mark.unit

SECRET = b"k" * 32
ROLES = ("anonymous", "cons", "prod", "pc", "topic", "admin-a", "admin-b", "admin")
GRANTS = {"cons": ("consume",), "prod": ("produce",), "pc": ("produce", "consume")}
# topic-level grants of role "topic", by full (base) topic name
TOPIC_GRANTS = {
    "persistent://ta/ns/p": ("produce", "consume"),
    "persistent://ta/ns/p-sub-DLQ": ("produce",),  # where p's webhook dead-letters
}

# The expectation, written from Pulsar's model independently of the rule table.
PUBLIC = re.compile(
    r"^/$|^/favicon\.ico$|^/ui/|^/(docs|redoc|openapi\.json|asyncapi\.json)|/brokers/health$|^/admin/v2/whoami$"
)
CLUSTER = re.compile(
    r"^/metrics$|^/admin/v2/(brokers|broker-stats|clusters|cluster/(?!namespaces/|topics/)|etcd/|storage/)"
    r"|^/admin/v2/tenants$"
    r"|^/admin/v2/analytics/(run|summary|settings|sql)"
)
CONSUME = re.compile(
    r"^/consume/|^/ws/v2/(consumer|reader)/|/subscription/\{subscription\}"
    r"|/(messages|search|examinemessage|messageid/\{timestamp\}|ledger/\{ledger\}/entry/\{entry\})$"
    r"|/\{topic\}/webhooks$"  # a topic's webhooks, as one webhook: their URLs may hold credentials
)
PRODUCE = re.compile(r"^/topics/|^/ws/v2/producer/")
LOOKUP = re.compile(
    r"^/lookup/|/(stats|stats/history|partitioned-stats|subscriptions|lastMessageId)$|^/admin/v2/analytics/topics/"
    r"|^/admin/v2/namespaces/\{tenant\}/\{namespace\}/topics$|^/admin/v2/persistent/\{tenant\}/\{namespace\}(/partitioned)?$"
    r"|^/admin/v2/cluster/topics/\{tenant\}/\{namespace\}$"  # a namespace's topic rows, as its topic list
)


def expected_need(method: str, template: str) -> str:
    if PUBLIC.search(template):
        return "public"
    if template == "/ws/v2/pingpong":
        return "authenticated"
    if CLUSTER.search(template) or (template == "/admin/v2/tenants/{tenant}" and method != "GET"):
        return "superuser"
    if CONSUME.search(template):
        return "consume"
    if PRODUCE.search(template):
        return "produce"
    if LOOKUP.search(template) or (method == "GET" and template.endswith("/{topic}/partitions")):
        return "lookup"
    if template.startswith("/admin/v2/schemas/") and (method == "GET" or template.endswith("/compatibility")):
        return "lookup"  # a topic's producers and consumers read its schema (Pulsar)
    return "tenant-admin"  # every other tenant-, namespace- or topic-admin action


def allowed(
    role: str, need: str, tenant: str | None, method: str = "", template: str = "", topic: str | None = None
) -> bool:
    if need == "public":
        return True
    if role == "anonymous":
        return False
    if role == "admin" or need == "authenticated":
        return True
    if need == "superuser" or tenant is None:
        return False
    if role == f"admin-{tenant[-1]}":
        return True
    actions = GRANTS.get(role, ()) if tenant == "ta" else ()
    if role == "topic" and topic is not None and "{topic" in template:
        actions = TOPIC_GRANTS.get(topic.split("-partition-")[0], ())
    if need == "lookup":
        return bool(actions)
    if method == "PUT" and template.endswith("/webhook"):  # it dead-letters to <topic>-<sub>-DLQ
        letters = actions
        if role == "topic" and topic is not None:
            letters = TOPIC_GRANTS.get(topic.split("-partition-")[0] + "-sub-DLQ", ())
        return "consume" in actions and "produce" in letters
    return need in actions


def routes(app: Any) -> Iterator[tuple[str, str]]:
    def walk(items: Any) -> Iterator[Any]:
        for route in items:
            if hasattr(route, "original_router"):
                yield from walk(route.original_router.routes)
            else:
                yield route

    for route in walk(app.router.routes):
        methods = getattr(route, "methods", None) or {"GET"}  # a WebSocket handshake is a GET
        for method in sorted(set(methods) - {"HEAD", "OPTIONS"}):
            yield method, route.path


def resources(template: str) -> Iterator[tuple[str | None, str, str | None]]:
    """(tenant, concrete path, full topic name or None) for each resource the template can name."""
    tenants = ("ta", "tb") if "{tenant}" in template else (None,)
    topics = ("t", "p", "p-partition-0") if re.search(r"\{topic(:topic)?\}", template) else ("",)
    domains = ("persistent", "non-persistent") if "{domain}" in template else ("persistent",)
    values = {
        "namespace": "ns",
        "subscription": "sub",
        "role": "someone",
        "cluster": "folio",
        "node_id": "n1",
        "bundle": "0x00000000_0x40000000",
        "partition": "0",
        "path": "dashboard.css",
    }
    for tenant in tenants:
        for topic in topics:
            for domain in domains:
                path = template
                for name, value in {
                    "tenant": tenant or "",
                    "topic": topic,
                    "domain": domain,
                    **values,
                }.items():
                    path = re.sub(r"\{" + name + r"(:\w+)?\}", value, path)
                path = re.sub(r"\{\w+\}", "1", path)  # numbers: seconds, count, ledger, ...
                admin_domain = "non-persistent" if "/non-persistent/" in template else "persistent"
                full = f"{domain if '{domain}' in template else admin_domain}://{tenant}/ns/{topic}"
                yield tenant, path, full if topic and tenant else None


async def reached(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1000})
        return
    await send({"type": "http.response.start", "status": 299, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def websocket_status(middleware: SecurityMiddleware, path: str, headers: dict[str, str]) -> int:
    scope = {
        "type": "websocket",
        "path": path,
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in {"host": "gw", **headers}.items()],
    }
    sent: list[dict[str, Any]] = []
    messages = [{"type": "websocket.connect"}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "websocket.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await middleware(scope, receive, send)
    first = sent[0]
    return 299 if first["type"] == "websocket.accept" else int(first["status"])


async def run_matrix(gateway: Gateway, app: Any) -> tuple[int, list[str], list[str]]:
    middleware = SecurityMiddleware(reached, app.state.guard)
    transport = httpx.ASGITransport(app=middleware)
    now = time.time()
    tokens = {role: mint(role, Algorithm.HS256, SECRET, now_s=now, expires_in_s=600) for role in ROLES}
    cells, unexpected_allow, unexpected_deny = 0, [], []
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        for method, template in sorted(set(routes(app))):
            need = expected_need(method, template)
            websocket = template.startswith("/ws/")
            for tenant, path, topic in resources(template):
                for role in ROLES:
                    headers = {} if role == "anonymous" else {"Authorization": f"Bearer {tokens[role]}"}
                    if websocket:
                        status = await websocket_status(middleware, path, headers)
                    else:
                        body = {"content": b"{}", "headers": {**headers, "content-type": "application/json"}}
                        status = (await http.request(method, path, **body)).status_code  # type: ignore[arg-type]
                    assert status in (299, 401, 403), (method, path, role, status)
                    cells += 1
                    cell = f"{method} {path} as {role}: {status}"
                    expected = allowed(role, need, tenant, method, template, topic)
                    if status == 299 and not expected:
                        unexpected_allow.append(cell)
                    elif status != 299 and expected:
                        unexpected_deny.append(cell)
    return cells, unexpected_allow, unexpected_deny


@pytest.fixture
async def secured() -> tuple[Gateway, Any]:
    config = SecurityConfig(TokenRules(Algorithm.HS256, SECRET), superusers=frozenset({"admin"}))
    gateway = Gateway(
        MemoryStore(SystemClock()), GatewayConfig("unit", "http://127.0.0.1:1", security=config)
    )
    app = create_app(gateway, manage_lifecycle=False)
    store = gateway.namespaces
    for tenant in ("ta", "tb"):
        await store.create_tenant(tenant, TenantInfo(admin_roles=(f"admin-{tenant[-1]}",)))
        await store.create_namespace(NamespaceName(tenant, "ns"))
    for role, actions in GRANTS.items():
        await store.update_policies(NamespaceName("ta", "ns"), lambda p, r=role, a=actions: p.grant(r, a))
    for topic, actions in TOPIC_GRANTS.items():
        await store.update_policies(
            NamespaceName("ta", "ns"), lambda p, t=topic, a=actions: p.grant_on_topic(t, "topic", a)
        )
    return gateway, app


def test_every_route_has_a_rule() -> None:
    gateway = Gateway(MemoryStore(SystemClock()), GatewayConfig("unit", "http://127.0.0.1:1"))
    app_routes = set(routes(create_app(gateway, manage_lifecycle=False)))
    missing = sorted(app_routes - set(rules.RULES))
    assert not missing, f"routes without a rule in gateway/security/rules.py: {missing}"
    assert not sorted(set(rules.RULES) - app_routes), "rules for routes the app does not have"
    assert rules.match("GET", "/no/such/route")[1].need is Need.SUPERUSER  # deny by default


async def test_permission_matrix(secured: tuple[Gateway, Any]) -> None:
    cells, allow, deny = await run_matrix(*secured)
    print(f"cells={cells} unexpected_allow={len(allow)} unexpected_deny={len(deny)}")
    assert cells > 2000
    assert not allow, allow[:20]
    assert not deny, deny[:20]


async def test_control_one_check_removed_is_reported(
    secured: tuple[Gateway, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    weakened = dict(rules.RULES)
    weakened[("POST", rules.SUB + "/skip_all")] = rules.Rule(Need.LOOKUP)
    monkeypatch.setattr(rules, "_COMPILED", rules.index(weakened))
    cells, allow, deny = await run_matrix(*secured)
    print(f"control: cells={cells} unexpected_allow={len(allow)} unexpected_deny={len(deny)}")
    assert allow and all("/skip_all as prod" in cell for cell in allow), allow
    assert not deny


async def test_control_topic_grants_ignored_is_reported(
    secured: tuple[Gateway, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Policies, "topic_actions", lambda self, topic, role: ())
    cells, allow, deny = await run_matrix(*secured)
    print(f"control (no topic grants): cells={cells} unexpected_allow={len(allow)}", end=" ")
    print(f"unexpected_deny={len(deny)}")
    assert deny and all(" as topic:" in cell and "/p" in cell for cell in deny), deny[:5]
    assert not allow
