"""What each dashboard page shell shows before its scripts run (pure).

Owns: the page catalogue - template, title, breadcrumbs, the active navigation
entry and the ``data-*`` values a page's script reads (tenant, namespace, topic,
partition) - built from the URL's path parameters, and every page's URL. Rules:
every page but the overview (``/``) lives under ``UI`` (``/ui/…``), a prefix no
API route uses, so a page never shares a path with an API route; names are
validated by ``gateway.names`` exactly as the admin API validates them, so a
page never exists for a name the API would refuse (``InvalidName`` -> the
router's 404). Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from gateway.names import NamespaceName, TopicName, check_tenant

UI = "/ui"
STATIC = f"{UI}/static"

NAV = (
    ("overview", "Overview", "/"),
    ("tenants", "Tenants", f"{UI}/tenants"),
    ("subscriptions", "Subscriptions", f"{UI}/subscriptions"),
    ("search", "Search", f"{UI}/search"),
    ("sql", "SQL", f"{UI}/sql"),
    ("grants", "Grants", f"{UI}/grants"),  # shown to superusers and tenant admins (base.html)
)


@dataclass(frozen=True, slots=True)
class Crumb:
    label: str
    href: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    template: str
    title: str
    nav: str
    crumbs: tuple[Crumb, ...] = ()
    data: dict[str, str] = field(default_factory=dict)


def _seg(value: str) -> str:
    return quote(value, safe="")


def overview() -> Page:
    return Page("overview.html", "Overview", "overview")


def sql() -> Page:
    return Page("sql.html", "SQL over topics", "sql", (Crumb("SQL over topics"),))


def search() -> Page:
    return Page("search.html", "Message search", "search", (Crumb("Message search"),))


def subscriptions() -> Page:
    return Page("subscriptions.html", "Subscriptions", "subscriptions", (Crumb("Subscriptions"),))


def grants() -> Page:
    return Page("grants.html", "Roles and grants", "grants", (Crumb("Roles and grants"),))


def tenants() -> Page:
    return Page("tenants.html", "Tenants", "tenants", (Crumb("Tenants"),))


def namespaces(tenant: str) -> Page:
    check_tenant(tenant)
    return Page(
        "namespaces.html",
        f"Tenant {tenant}",
        "tenants",
        (Crumb("Tenants", tenants_href()), Crumb(tenant)),
        {"tenant": tenant},
    )


def topics(tenant: str, namespace: str) -> Page:
    ns = NamespaceName.of(tenant, namespace)
    return Page(
        "topics.html",
        f"Namespace {ns}",
        "tenants",
        (
            Crumb("Tenants", tenants_href()),
            Crumb(tenant, namespaces_href(tenant)),
            Crumb(namespace),
        ),
        {"tenant": tenant, "namespace": namespace},
    )


def topic(tenant: str, namespace: str, local: str) -> Page:
    name = TopicName.of("persistent", tenant, namespace, local)
    crumbs = [
        Crumb("Tenants", tenants_href()),
        Crumb(tenant, namespaces_href(tenant)),
        Crumb(namespace, topics_href(tenant, namespace)),
    ]
    data = {"tenant": tenant, "namespace": namespace, "topic": local, "partition": "-1"}
    if name.is_partition:
        base = name.base
        crumbs.append(Crumb(base.local, topic_href(tenant, namespace, base.local)))
        data["partition"] = str(name.partition_index)
        data["base"] = base.local
    crumbs.append(Crumb(local))
    return Page("topic.html", f"Topic {name}", "tenants", tuple(crumbs), data)


def tenants_href() -> str:
    return f"{UI}/tenants"


def namespaces_href(tenant: str) -> str:
    return f"{UI}/tenants/{_seg(tenant)}"


def topics_href(tenant: str, namespace: str) -> str:
    return f"{UI}/tenants/{_seg(tenant)}/{_seg(namespace)}"


def topic_href(tenant: str, namespace: str, local: str) -> str:
    return f"{UI}/topics/persistent/{_seg(tenant)}/{_seg(namespace)}/{_seg(local)}"
