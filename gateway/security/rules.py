"""What each route of the gateway requires: the one table the authorization layer reads.

Owns: ``RULES`` ((method, path template) -> ``Rule``) and ``match``. Rules
(docs/decisions/0009-security-model.md):
- a request whose route is not in the table needs a superuser (deny by
  default): a route added without a rule is closed, and the permission-matrix
  test fails until the table names it;
- data actions follow Pulsar: publishing needs ``produce``; consuming, readers,
  peeking and moving a subscription's cursor need ``consume``; metadata and
  stats of a topic need either (``LOOKUP``); creating, deleting, terminating,
  unloading topics, every namespace policy and grant need a tenant admin;
  tenants, brokers, storage nodes and cluster views need a superuser (the
  dashboard's rows of a tenant's namespaces or of a namespace's topics need
  what the lists of their names need);
- letters (``Letters``): the gateway never writes anywhere with its own
  authority. A consumer's dead-letter topic (``deadLetterTopic``, or the
  default ``<topic>-<subscription>-DLQ`` once ``maxRedeliverCount`` is set)
  must be one the caller may produce to, and its retry topic too before a
  ``reconsumeLater`` is carried out; setting a webhook needs ``produce`` on its
  default dead-letter topic (a named one is checked by the handler);
- ``json_body``: the route parses a JSON body, so it accepts only
  ``Content-Type: application/json`` (a cross-site form cannot send that).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from gateway.security.policy import Need

P = Need.PUBLIC
SU = Need.SUPERUSER
TA = Need.TENANT_ADMIN
PRODUCE = Need.PRODUCE
CONSUME = Need.CONSUME
LOOKUP = Need.LOOKUP


class Letters(enum.Enum):
    """Who dead-letters for the caller, so the caller must be allowed to produce there."""

    CONSUMER = "consumer"  # named deadLetterTopic, or the default once maxRedeliverCount is set
    WEBHOOK = "webhook"  # the default dead-letter topic, always


@dataclass(frozen=True, slots=True)
class Rule:
    need: Need
    json_body: bool = False
    letters: Letters | None = None


NS = "/admin/v2/namespaces/{tenant}/{namespace}"
T = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
NPT = "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}"
SUB = T + "/subscription/{subscription}"
NS_POLICIES = (
    "autoTopicCreation",
    "backlogQuota",
    "deduplication",
    "maxConsumersPerSubscription",
    "maxProducersPerTopic",
    "maxConsumersPerTopic",
    "maxSubscriptionsPerTopic",
    "maxTopicsPerNamespace",
    "messageTTL",
    "persistence",
    "retention",
    "schemaCompatibilityStrategy",
    "isAllowAutoUpdateSchema",
    "analyticsInterval",
)
SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"


def _table() -> dict[tuple[str, str], Rule]:
    rules: dict[tuple[str, str], Rule] = {
        # public: health for load balancers, the API documents, the dashboard's page shells
        ("GET", "/admin/v2/brokers/health"): Rule(P),
        ("GET", "/openapi.json"): Rule(P),
        ("GET", "/asyncapi.json"): Rule(P),
        ("GET", "/docs"): Rule(P),
        ("GET", "/docs/oauth2-redirect"): Rule(P),
        ("GET", "/redoc"): Rule(P),
        ("GET", "/"): Rule(P),
        ("GET", "/favicon.ico"): Rule(P),
        ("GET", "/ui/static/{path:path}"): Rule(P),
        ("GET", "/ui/tenants"): Rule(P),
        ("GET", "/ui/sql"): Rule(P),
        ("GET", "/ui/subscriptions"): Rule(P),
        ("GET", "/ui/grants"): Rule(P),
        ("GET", "/ui/search"): Rule(P),
        ("GET", "/ui/tenants/{tenant}"): Rule(P),
        ("GET", "/ui/tenants/{tenant}/{namespace}"): Rule(P),
        ("GET", "/ui/topics/persistent/{tenant}/{namespace}/{topic}"): Rule(P),
        ("GET", "/ws/v2/pingpong"): Rule(Need.AUTHENTICATED),
        ("GET", "/admin/v2/whoami"): Rule(P),  # the caller's own rights (none when anonymous)
        # the cluster: superusers
        ("GET", "/metrics"): Rule(SU),
        ("GET", "/admin/v2/broker-stats/topics"): Rule(SU),
        ("GET", "/admin/v2/broker-stats/subscriptions"): Rule(SU),
        ("GET", "/admin/v2/broker-stats/throughput"): Rule(SU),
        ("GET", "/admin/v2/cluster/tenants"): Rule(SU),
        ("GET", "/admin/v2/cluster/subscriptions"): Rule(SU),
        ("GET", "/admin/v2/cluster/throughput"): Rule(SU),
        ("GET", "/admin/v2/brokers"): Rule(SU),
        ("GET", "/admin/v2/brokers/{cluster}"): Rule(SU),
        ("GET", "/admin/v2/cluster/overview"): Rule(SU),
        ("GET", "/admin/v2/clusters"): Rule(SU),
        # the Spark statistics and SQL over any topic: superusers; one topic's statistics: as its stats
        ("GET", "/admin/v2/analytics/run"): Rule(SU),
        ("POST", "/admin/v2/analytics/run"): Rule(SU),
        ("GET", "/admin/v2/analytics/summary"): Rule(SU),
        ("GET", "/admin/v2/analytics/settings"): Rule(SU),
        ("PUT", "/admin/v2/analytics/settings"): Rule(SU, json_body=True),
        ("GET", "/admin/v2/analytics/topics/{domain}/{tenant}/{namespace}/{topic}"): Rule(LOOKUP),
        ("POST", "/admin/v2/analytics/sql"): Rule(SU, json_body=True),
        ("GET", "/admin/v2/analytics/sql"): Rule(SU),
        ("GET", "/admin/v2/analytics/sql/{query_id}"): Rule(SU),
        ("GET", "/admin/v2/analytics/sql/{query_id}/csv"): Rule(SU),
        ("GET", "/admin/v2/etcd/members"): Rule(SU),
        ("GET", "/admin/v2/storage/nodes"): Rule(SU),
        ("DELETE", "/admin/v2/storage/nodes/{node_id}"): Rule(SU),
        ("POST", "/admin/v2/storage/nodes/{node_id}/decommission"): Rule(SU),
        ("GET", "/admin/v2/storage/nodes/{node_id}/decommission"): Rule(SU),
        ("DELETE", "/admin/v2/storage/nodes/{node_id}/decommission"): Rule(SU),
        ("GET", "/admin/v2/storage/decommissions"): Rule(SU),
        ("GET", "/admin/v2/storage/recovery"): Rule(SU),
        ("GET", "/admin/v2/storage/under-replicated"): Rule(SU),
        ("GET", "/admin/v2/tenants"): Rule(SU),
        ("PUT", "/admin/v2/tenants/{tenant}"): Rule(SU, json_body=True),
        ("POST", "/admin/v2/tenants/{tenant}"): Rule(SU, json_body=True),
        ("DELETE", "/admin/v2/tenants/{tenant}"): Rule(SU),
        # a tenant: its admins
        ("GET", "/admin/v2/tenants/{tenant}"): Rule(TA),
        ("GET", "/admin/v2/namespaces/{tenant}"): Rule(TA),
        ("GET", "/admin/v2/cluster/namespaces/{tenant}"): Rule(TA),  # rows of the list above
        ("GET", NS): Rule(TA),
        ("PUT", NS): Rule(TA, json_body=True),
        ("DELETE", NS): Rule(TA),
        ("GET", NS + "/backlogQuotaMap"): Rule(TA),
        ("GET", NS + "/bundles"): Rule(TA),
        ("GET", NS + "/permissions"): Rule(TA),
        ("POST", NS + "/permissions/{role}"): Rule(TA, json_body=True),
        ("DELETE", NS + "/permissions/{role}"): Rule(TA),
        ("PUT", NS + "/unload"): Rule(TA),
        # a topic's own grants (persistent and non-persistent): tenant admins
        ("GET", T + "/permissions"): Rule(TA),
        ("POST", T + "/permissions/{role}"): Rule(TA, json_body=True),
        ("DELETE", T + "/permissions/{role}"): Rule(TA),
        ("GET", NPT + "/permissions"): Rule(TA),
        ("POST", NPT + "/permissions/{role}"): Rule(TA, json_body=True),
        ("DELETE", NPT + "/permissions/{role}"): Rule(TA),
        ("PUT", NS + "/{bundle:bundle}/unload"): Rule(TA),
        ("GET", NS + "/topics"): Rule(LOOKUP),
        ("GET", "/admin/v2/persistent/{tenant}/{namespace}"): Rule(LOOKUP),
        ("GET", "/admin/v2/cluster/topics/{tenant}/{namespace}"): Rule(LOOKUP),  # rows of the list above
        ("GET", "/admin/v2/persistent/{tenant}/{namespace}/partitioned"): Rule(LOOKUP),
        ("PUT", "/admin/v2/persistent/{tenant}/{namespace}/{topic:topic}"): Rule(TA, json_body=True),
        ("DELETE", "/admin/v2/persistent/{tenant}/{namespace}/{topic:topic}"): Rule(TA),
        ("PUT", T + "/partitions"): Rule(TA, json_body=True),
        ("POST", T + "/partitions"): Rule(TA, json_body=True),
        ("DELETE", T + "/partitions"): Rule(TA),
        ("POST", T + "/terminate"): Rule(TA),
        ("PUT", T + "/unload"): Rule(TA),
        ("POST", T + "/all_subscription/expireMessages/{seconds}"): Rule(TA),
        # a topic's metadata and stats: produce or consume
        ("GET", T + "/partitions"): Rule(LOOKUP),
        ("GET", T + "/stats"): Rule(LOOKUP),
        ("GET", T + "/stats/history"): Rule(LOOKUP),
        ("GET", T + "/partitioned-stats"): Rule(LOOKUP),
        ("GET", T + "/internalStats"): Rule(TA),  # ledger ids and storage-node addresses
        ("GET", T + "/partitioned-internalStats"): Rule(TA),
        ("GET", T + "/subscriptions"): Rule(LOOKUP),
        ("GET", T + "/lastMessageId"): Rule(LOOKUP),
        ("GET", T + "/webhooks"): Rule(CONSUME),  # as one webhook: their URLs may hold credentials
        ("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}"): Rule(LOOKUP),
        ("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle"): Rule(LOOKUP),
        # reading messages and moving cursors: consume
        ("GET", T + "/examinemessage"): Rule(CONSUME),
        ("GET", T + "/messages"): Rule(CONSUME),
        ("GET", T + "/search"): Rule(CONSUME),  # message search (docs/decisions/0016)
        ("GET", T + "/messageid/{timestamp}"): Rule(CONSUME),
        ("GET", T + "/ledger/{ledger}/entry/{entry}"): Rule(CONSUME),
        ("PUT", SUB): Rule(CONSUME, json_body=True),
        ("DELETE", SUB): Rule(CONSUME),
        ("POST", SUB + "/expireMessages"): Rule(CONSUME, json_body=True),
        ("POST", SUB + "/expireMessages/{seconds}"): Rule(CONSUME),
        ("GET", SUB + "/messages"): Rule(CONSUME),
        ("GET", SUB + "/position/{n}"): Rule(CONSUME),
        ("POST", SUB + "/resetcursor"): Rule(CONSUME, json_body=True),
        ("POST", SUB + "/resetcursor/{timestamp}"): Rule(CONSUME),
        ("POST", SUB + "/skip/{count}"): Rule(CONSUME),
        ("POST", SUB + "/skip_all"): Rule(CONSUME),
        ("GET", SUB + "/webhook"): Rule(CONSUME),
        ("PUT", SUB + "/webhook"): Rule(CONSUME, json_body=True, letters=Letters.WEBHOOK),
        ("DELETE", SUB + "/webhook"): Rule(CONSUME),
        ("GET", "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}"): Rule(
            CONSUME, letters=Letters.CONSUMER
        ),
        ("POST", "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}/ack"): Rule(
            CONSUME, json_body=True
        ),
        ("POST", "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}/nack"): Rule(
            CONSUME, json_body=True
        ),
        ("GET", "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}/stream"): Rule(
            CONSUME, letters=Letters.CONSUMER
        ),
        ("GET", "/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}"): Rule(
            CONSUME, letters=Letters.CONSUMER
        ),
        ("GET", "/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}"): Rule(CONSUME),
        # publishing: produce (the body is the payload, any content type)
        ("GET", "/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}"): Rule(PRODUCE),
        ("POST", "/topics/{domain}/{tenant}/{namespace}/{topic}"): Rule(PRODUCE),
        ("POST", "/topics/{domain}/{tenant}/{namespace}/{topic}/partitions/{partition}"): Rule(PRODUCE),
    }
    for policy in NS_POLICIES:
        rules[("GET", f"{NS}/{policy}")] = Rule(TA)
        rules[("POST", f"{NS}/{policy}")] = Rule(TA, json_body=True)
        rules[("DELETE", f"{NS}/{policy}")] = Rule(TA)
    rules[("PUT", f"{NS}/schemaCompatibilityStrategy")] = Rule(TA, json_body=True)  # Pulsar's verb
    # a topic's schema: read by its producers and consumers, changed by tenant admins
    rules[("GET", SCHEMA + "/schema")] = Rule(LOOKUP)
    rules[("GET", SCHEMA + "/schema/{version}")] = Rule(LOOKUP)
    rules[("GET", SCHEMA + "/schemas")] = Rule(LOOKUP)
    rules[("GET", SCHEMA + "/versions")] = Rule(LOOKUP)
    rules[("POST", SCHEMA + "/compatibility")] = Rule(LOOKUP, json_body=True)
    rules[("POST", SCHEMA + "/schema")] = Rule(TA, json_body=True)
    rules[("DELETE", SCHEMA + "/schema")] = Rule(TA)
    rules.pop(("GET", f"{NS}/backlogQuota"))  # read through backlogQuotaMap
    return rules


RULES = _table()
DEFAULT = Rule(SU)  # a route the table does not name

_PARAM = re.compile(r"\{(\w+)(?::(\w+))?\}")


def _compile(template: str) -> re.Pattern[str]:
    pattern, last = "", 0
    for m in _PARAM.finditer(template):
        pattern += re.escape(template[last : m.start()])
        pattern += f"(?P<{m.group(1)}>.+)" if m.group(2) == "path" else f"(?P<{m.group(1)}>[^/]+)"
        last = m.end()
    return re.compile(pattern + re.escape(template[last:]) + "$")


Index = dict[str, dict[tuple[str, ...], list[tuple[re.Pattern[str], int, str, Rule]]]]
_PREFIX = 3  # templates are bucketed by up to this many leading literal segments


def _literal_prefix(template: str) -> tuple[str, ...]:
    segments = [s for s in template.strip("/").split("/") if s]
    prefix: list[str] = []
    for segment in segments[:_PREFIX]:
        if "{" in segment:
            break
        prefix.append(segment)
    return tuple(prefix)


def index(table: dict[tuple[str, str], Rule]) -> Index:
    """The table compiled for ``match``: by method, then by leading literal segments."""
    compiled: Index = {}
    for (method, template), rule in table.items():
        buckets = compiled.setdefault(method, {})
        weight = len(_PARAM.sub("", template))  # literal characters: the more, the more specific
        buckets.setdefault(_literal_prefix(template), []).append((_compile(template), weight, template, rule))
    return compiled


_COMPILED = index(RULES)


def match(method: str, path: str) -> tuple[str | None, Rule, dict[str, str]]:
    """The rule for ``method`` ``path`` (HEAD as GET; WebSocket handshakes as GET):
    (template or None, rule, path parameters). Unnamed routes get ``DEFAULT``.
    Where several templates match, the one with most literal characters wins
    (as the app's own routing prefers ``…/unload`` to ``…/{topic}``)."""
    buckets = _COMPILED.get("GET" if method == "HEAD" else method, {})
    segments = [s for s in path.strip("/").split("/", _PREFIX)[:_PREFIX] if s]
    best: tuple[int, str, Rule, dict[str, str]] | None = None
    for size in range(len(segments) + 1):
        for pattern, weight, template, rule in buckets.get(tuple(segments[:size]), ()):
            if best is not None and weight <= best[0]:
                continue
            m = pattern.match(path)
            if m is not None:
                best = (weight, template, rule, m.groupdict())
    if best is None:
        return None, DEFAULT, {}
    return best[1], best[2], best[3]
