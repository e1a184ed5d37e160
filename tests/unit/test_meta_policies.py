"""Namespace policies: Pulsar JSON field names, defaults, validation, bundle boundaries."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.meta.bundle_policy import Bundles
from gateway.meta.errors import InvalidArgument, InvalidPolicy, PreconditionFailed
from gateway.meta.policies import (
    AutoTopicCreation,
    BacklogQuota,
    Policies,
    Retention,
    parse_enabled,
    parse_limit,
    parse_ttl_seconds,
)
from gateway.meta.tenant_info import TenantInfo
from gateway.ownership.bundles import boundaries

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------- bundles


def test_boundaries_for_one_four_and_eight_bundles() -> None:
    assert boundaries(1) == [0, 0xFFFFFFFF]
    assert boundaries(4) == [0, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
    assert boundaries(8) == [i * 0x20000000 for i in range(8)] + [0xFFFFFFFF]


def test_bundles_json_matches_pulsar_and_names_ranges() -> None:
    assert Bundles().to_json() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }
    assert Bundles.of(1).ranges() == ["0x00000000_0xffffffff"]
    assert Bundles().ranges()[0] == "0x00000000_0x40000000"
    assert Bundles().ranges()[-1] == "0xc0000000_0xffffffff"
    assert Bundles.of(3).boundaries == (0, 0x55555555, 0xAAAAAAAA, 0xFFFFFFFF)


def test_bundles_from_count_only_or_custom_boundaries() -> None:
    assert Bundles.from_json({"numBundles": 8}).count == 8
    assert Bundles.from_json({}).count == 4
    custom = Bundles.from_json({"boundaries": ["0x00000000", "0x10000000", "0xffffffff"]})
    assert custom.boundaries == (0, 0x10000000, 0xFFFFFFFF)
    assert Bundles.from_json(custom.to_json()) == custom


@pytest.mark.parametrize(
    ("bundles", "message"),
    [
        ({"numBundles": 0}, "numBundles"),
        ({"numBundles": 129}, "numBundles"),
        ({"numBundles": True}, "integer"),
        ({"numBundles": "4"}, "integer"),
        ({"boundaries": ["0x00000000", "0x80000000"]}, "end at 0xffffffff"),
        ({"boundaries": ["0x00000001", "0xffffffff"]}, "start at 0x00000000"),
        ({"boundaries": ["0x00000000", "0x80000000", "0x70000000", "0xffffffff"]}, "strictly increasing"),
        ({"boundaries": ["0x00000000", "zz", "0xffffffff"]}, "0x40000000"),
        ({"boundaries": ["0x00000000", "0x1ffffffff"]}, "outside"),
        ({"numBundles": 2, "boundaries": ["0x00000000", "0xffffffff"]}, "make 1"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_bundles_are_refused_with_the_reason(bundles: Any, message: str) -> None:
    with pytest.raises(InvalidPolicy, match=message):
        Bundles.from_json(bundles)


# ---------------------------------------------------------------- the document


def test_default_policies_json_uses_pulsar_field_names() -> None:
    assert Policies().to_json() == {
        "bundles": Bundles().to_json(),
        "retention_policies": {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
        "message_ttl_in_seconds": None,
        "backlog_quota_map": {},
        "deduplicationEnabled": None,
        "max_consumers_per_subscription": None,
        "max_producers_per_topic": None,
        "max_consumers_per_topic": None,
        "max_subscriptions_per_topic": None,
        "max_topics_per_namespace": None,
        "autoTopicCreationOverride": {
            "allowAutoTopicCreation": True,
            "topicType": "non-partitioned",
            "defaultNumPartitions": None,
        },
        "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
        "persistence": None,
        "schema_compatibility_strategy": "UNDEFINED",
        "is_allow_auto_update_schema": True,
        "analyticsIntervalSeconds": None,
        "deleted": False,
    }
    assert Policies().deduplication is False


def test_permissions_round_trip_and_are_validated() -> None:
    policies = Policies().grant("app", ("consume", "produce")).grant("ops", ("produce",))
    assert Policies.from_json(policies.to_json()).permissions == {
        "app": ("consume", "produce"),
        "ops": ("produce",),
    }
    assert policies.revoke("ops").permissions == {"app": ("consume", "produce")}
    for bad in (False, 0, "", [], {"namespace_auth": []}, {"namespace_auth": {"r": ["read"]}}):
        with pytest.raises(InvalidPolicy):
            Policies.from_json({"auth_policies": bad})
    assert Policies.from_json({"auth_policies": {"namespace_auth": {}}}).permissions == {}


FULL = {
    "bundles": {"numBundles": 8},
    "retention_policies": {"retentionTimeInMinutes": -1, "retentionSizeInMB": 2048},
    "message_ttl_in_seconds": 3600,
    "backlog_quota_map": {
        "destination_storage": {"limitSize": 1 << 30, "limitTime": -1, "policy": "producer_exception"}
    },
    "deduplicationEnabled": True,
    "max_consumers_per_subscription": 5,
    "max_producers_per_topic": 0,
    "autoTopicCreationOverride": {
        "allowAutoTopicCreation": True,
        "topicType": "partitioned",
        "defaultNumPartitions": 3,
    },
}


def test_full_policies_round_trip_through_json_and_bytes() -> None:
    policies = Policies.from_json(FULL)
    assert policies.bundles.count == 8
    assert policies.retention == Retention(-1, 2048)
    assert policies.message_ttl_seconds == 3600
    assert policies.backlog_quotas == {"destination_storage": BacklogQuota(1 << 30, -1, "producer_exception")}
    assert policies.deduplication
    assert policies.max_consumers_per_subscription == 5
    assert policies.max_producers_per_topic == 0
    assert policies.auto_topic_creation == AutoTopicCreation(True, "partitioned", 3)
    out = policies.to_json()
    assert out["bundles"]["boundaries"][1] == "0x20000000"
    assert Policies.from_json(out) == policies
    assert Policies.decode(policies.encode()) == policies


def test_unknown_fields_are_ignored_and_nulls_mean_default() -> None:
    body: dict[str, Any] = {
        "auth_policies": {"namespace_auth": {}},
        "replication_clusters": ["standalone"],
        "bundles": None,
        "retention_policies": None,
        "deduplicationEnabled": None,
        "autoTopicCreationOverride": None,
        "backlog_quota_map": None,
        "deleted": False,
    }
    assert Policies.from_json(body) == Policies()


def test_legacy_limit_alias_and_quota_defaults() -> None:
    assert BacklogQuota.from_json({"limit": 100}) == BacklogQuota(100, -1, "producer_request_hold")
    assert BacklogQuota.from_json({}) == BacklogQuota()
    assert BacklogQuota.from_json({"limitSize": 5, "limit": 7}).limit_size == 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"retention_policies": {"retentionTimeInMinutes": -2, "retentionSizeInMB": 1}}, "between -1"),
        ({"retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 0}}, "use -1"),
        ({"retention_policies": {"retentionTimeInMinutes": "60", "retentionSizeInMB": 1}}, "integer"),
        ({"message_ttl_in_seconds": -5}, "message_ttl_in_seconds"),
        ({"message_ttl_in_seconds": 1.5}, "integer"),
        ({"deduplicationEnabled": "yes"}, "true or false"),
        ({"max_consumers_per_subscription": -1}, "max_consumers_per_subscription"),
        ({"backlog_quota_map": {"destination_storage": {"policy": "drop_everything"}}}, "policy must be"),
        ({"backlog_quota_map": {"weird": {}}}, "backlog quota type"),
        ({"backlog_quota_map": {"destination_storage": {"limitSize": -2}}}, "limitSize"),
        ({"autoTopicCreationOverride": {"topicType": "partitioned"}}, "allowAutoTopicCreation"),
        (
            {"autoTopicCreationOverride": {"allowAutoTopicCreation": True, "topicType": "partitioned"}},
            "defaultNumPartitions",
        ),
        (
            {"autoTopicCreationOverride": {"allowAutoTopicCreation": True, "topicType": "sharded"}},
            "topicType",
        ),
        ({"autoTopicCreationOverride": {"allowAutoTopicCreation": 1}}, "true or false"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidPolicy, match=message):
        Policies.from_json(change)


def test_policies_must_be_an_object_and_errors_are_400_class() -> None:
    with pytest.raises(InvalidPolicy, match="JSON object"):
        Policies.from_json([1])
    with pytest.raises(InvalidPolicy, match="not JSON"):
        Policies.decode(b"{nope")
    assert issubclass(InvalidPolicy, InvalidArgument)
    assert InvalidPolicy.code == "invalid_policy"


def test_backlog_quota_beyond_retention_is_a_precondition_failure() -> None:
    body = {
        "retention_policies": {"retentionTimeInMinutes": 10, "retentionSizeInMB": 1},
        "backlog_quota_map": {"destination_storage": {"limitSize": 2 * 1024 * 1024}},
    }
    with pytest.raises(PreconditionFailed, match="exceeds the retention size"):
        Policies.from_json(body)
    body["backlog_quota_map"] = {"message_age": {"limitTime": 601}}
    with pytest.raises(PreconditionFailed, match="exceeds the retention time"):
        Policies.from_json(body)
    body["backlog_quota_map"] = {"message_age": {"limitTime": 600}}
    assert Policies.from_json(body).backlog_quotas["message_age"].limit_time == 600


def test_scalar_setter_bodies() -> None:
    assert parse_ttl_seconds(0) == 0
    assert parse_limit(7, "x") == 7
    assert parse_enabled(False, "dedup") is False
    for bad in (-1, True, "10", None):
        with pytest.raises(InvalidPolicy):
            parse_ttl_seconds(bad)
    with pytest.raises(InvalidPolicy, match="true or false"):
        parse_enabled(1, "deduplication")


def test_tenant_info_json_and_deleted_marker() -> None:
    info = TenantInfo.from_json({"adminRoles": ["ops"], "allowedClusters": ["c1"], "extra": 1})
    assert info.to_json() == {"adminRoles": ["ops"], "allowedClusters": ["c1"]}
    assert TenantInfo.from_json(None) == TenantInfo()
    marked = TenantInfo(("ops",), (), deleted=True)
    assert orjson.loads(marked.encode())["deleted"] is True
    assert TenantInfo.decode(marked.encode()) == marked
    with pytest.raises(InvalidPolicy, match="adminRoles"):
        TenantInfo.from_json({"adminRoles": "ops"})


_quota = st.builds(
    BacklogQuota,
    st.integers(-1, 1 << 40),
    st.integers(-1, 1 << 20),
    st.sampled_from(["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]),
)


@settings(max_examples=200, deadline=None)
@given(
    bundles=st.integers(1, 128),
    ttl=st.none() | st.integers(0, 1 << 30),
    dedup=st.none() | st.booleans(),
    consumers=st.none() | st.integers(0, 1000),
    quota=st.none() | _quota,
    auto=st.booleans(),
)
def test_round_trip_property(
    bundles: int, ttl: int | None, dedup: bool | None, consumers: int | None, quota: Any, auto: bool
) -> None:
    policies = Policies(
        bundles=Bundles.of(bundles),
        retention=Retention(-1, -1),
        message_ttl_seconds=ttl,
        backlog_quotas={} if quota is None else {"destination_storage": quota},
        deduplication_enabled=dedup,
        max_consumers_per_subscription=consumers,
        auto_topic_creation=AutoTopicCreation(auto),
    )
    assert Policies.decode(policies.encode()) == policies
    assert Policies.from_json(orjson.loads(orjson.dumps(policies.to_json()))) == policies
