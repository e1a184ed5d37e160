"""The dashboard's page catalogue (gateway/dashboard/pages.py): names validated like the API."""

from __future__ import annotations

import pytest

from gateway.dashboard import pages
from gateway.dashboard.routes import asset_version
from gateway.names import InvalidName

pytestmark = pytest.mark.unit


def test_topic_page_of_a_partition_links_its_partitioned_topic() -> None:
    page = pages.topic("acme", "prod", "orders-partition-2")
    assert page.template == "topic.html"
    assert page.data == {
        "tenant": "acme",
        "namespace": "prod",
        "topic": "orders-partition-2",
        "partition": "2",
        "base": "orders",
    }
    assert [c.label for c in page.crumbs] == ["Tenants", "acme", "prod", "orders", "orders-partition-2"]
    assert [c.href for c in page.crumbs] == [
        "/ui/tenants",
        "/ui/tenants/acme",
        "/ui/tenants/acme/prod",
        "/ui/topics/persistent/acme/prod/orders",
        None,
    ]


def test_links_escape_path_segments() -> None:
    assert pages.topic_href("a", "b", "x y") == "/ui/topics/persistent/a/b/x%20y"
    assert pages.topics("t", "ns").crumbs[1].href == "/ui/tenants/t"
    assert pages.namespaces_href("a/b") == "/ui/tenants/a%2Fb"


def test_every_page_but_the_overview_is_under_ui() -> None:
    assert [href for _, _, href in pages.NAV] == [
        "/",
        "/ui/tenants",
        "/ui/subscriptions",
        "/ui/search",
        "/ui/sql",
        "/ui/grants",
    ]
    assert pages.STATIC == "/ui/static"


@pytest.mark.parametrize("build", [lambda: pages.namespaces("bad/name"), lambda: pages.topic("t", "ns", "")])
def test_names_the_api_refuses_have_no_page(build: object) -> None:
    with pytest.raises(InvalidName):
        build()  # type: ignore[operator]


def test_asset_version_changes_with_the_files(tmp_path: object) -> None:
    from pathlib import Path

    root = Path(str(tmp_path))
    (root / "a.js").write_text("1")
    first = asset_version(root)
    (root / "a.js").write_text("22")
    assert asset_version(root) != first
