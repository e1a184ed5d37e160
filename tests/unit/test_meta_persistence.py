"""The namespace persistence policy (Pulsar PersistencePolicies): parsing, validation, JSON,
its place in ``Policies``, and how a topic's next ledger picks its quorums from it."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.broker.log_state import LogConfig, Quorums
from gateway.meta.errors import InvalidPolicy
from gateway.meta.persistence import ENSEMBLE_MAX, ORDER_RULE, Persistence
from gateway.meta.policies import Policies
from gateway.process import topic_policies

pytestmark = pytest.mark.unit

E, QW, QA, RATE = (
    "bookkeeperEnsemble",
    "bookkeeperWriteQuorum",
    "bookkeeperAckQuorum",
    "managedLedgerMaxMarkDeleteRate",
)


def body(ensemble: Any = 3, write: Any = 2, ack: Any = 2, **extra: Any) -> dict[str, Any]:
    return {E: ensemble, QW: write, QA: ack, **extra}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (body(3, 2, 2, **{RATE: 0.0}), Persistence(3, 2, 2, 0.0)),
        (body(3, 3, 2), Persistence(3, 3, 2)),  # the rate may be absent ...
        (body(1, 1, 1, **{RATE: None}), Persistence(1, 1, 1)),  # ... or null
        (body(ENSEMBLE_MAX, ENSEMBLE_MAX, ENSEMBLE_MAX), Persistence(16, 16, 16)),
        (body(5, 3, 1, **{RATE: 2}), Persistence(5, 3, 1, 2.0)),  # an integer rate is a number
        (body(3, 2, 2, managedLedgerStorageClassName="bookkeeper"), Persistence(3, 2, 2)),  # unknown
    ],
)
def test_good_bodies_parse(given: dict[str, Any], expected: Persistence) -> None:
    assert Persistence.from_json(given) == expected


def test_json_uses_pulsar_field_names_and_round_trips() -> None:
    persistence = Persistence(3, 2, 2, 1.5)
    assert persistence.to_json() == {E: 3, QW: 2, QA: 2, RATE: 1.5}
    assert Persistence.from_json(persistence.to_json()) == persistence
    assert Persistence(3, 2, 2).to_json()[RATE] == 0.0


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (body(2, 3, 2), f"{ORDER_RULE}: {QW} 3 is more than {E} 2"),
        (body(3, 2, 3), f"{ORDER_RULE}: {QA} 3 is more than {QW} 2"),
        (body(3, 3, 0), f"{QA} must be between 1 and {ENSEMBLE_MAX}, got 0"),
        (body(0, 0, 0), f"{E} must be between 1 and {ENSEMBLE_MAX}, got 0"),
        (body(3, -1, 1), f"{QW} must be between 1"),
        (body(ENSEMBLE_MAX + 1, 3, 2), f"{E} must be between 1 and {ENSEMBLE_MAX}, got 17"),
        (body("3", 2, 2), f"{E} must be an integer, got str '3'"),
        (body(3, 2.5, 2), f"{QW} must be an integer, got float 2.5"),
        (body(3, True, 1), f"{QW} must be an integer, got bool True"),
        ({QW: 2, QA: 2}, f"persistence needs {E}, an integer from 1 to {ENSEMBLE_MAX}"),
        (body(3, None, 2), f"persistence needs {QW}"),
        (body(3, 2, 2, **{RATE: -1}), f"{RATE} must be between 0"),
        (body(3, 2, 2, **{RATE: "fast"}), f"{RATE} must be a number, got str"),
        (body(3, 2, 2, **{RATE: False}), f"{RATE} must be a number, got bool"),
        (body(3, 2, 2, **{RATE: float("nan")}), f"{RATE} must be between 0"),
        (body(3, 2, 2, **{RATE: float("inf")}), f"{RATE} must be between 0"),
        ([3, 2, 2], "persistence must be a JSON object, got list"),
        (3, "persistence must be a JSON object, got int 3"),
    ],
)
def test_each_bad_body_is_refused_saying_what_is_wrong(given: Any, message: str) -> None:
    with pytest.raises(InvalidPolicy) as caught:
        Persistence.from_json(given)
    assert str(caught.value).startswith(message), str(caught.value)
    assert caught.value.code == "invalid_policy"  # 400 through gateway.api.errors


def test_values_out_of_order_cannot_be_built_either() -> None:
    with pytest.raises(InvalidPolicy, match="is more than"):
        Persistence(2, 3, 1)


def test_policies_store_it_as_pulsar_persistence_and_null_when_unset() -> None:
    assert Policies().to_json()["persistence"] is None
    assert Policies.from_json({"persistence": None}).persistence is None
    policies = Policies.from_json({"persistence": body(3, 2, 2)})
    assert policies.persistence == Persistence(3, 2, 2)
    assert policies.to_json()["persistence"] == {E: 3, QW: 2, QA: 2, RATE: 0.0}
    assert Policies.decode(policies.encode()) == policies
    with pytest.raises(InvalidPolicy, match=ORDER_RULE):
        Policies.from_json({"persistence": body(1, 2, 1)})


def test_a_topic_takes_the_namespace_quorums_else_the_gateway_defaults() -> None:
    config = LogConfig()
    assert topic_policies(Policies()).quorums is None
    assert config.quorums() == Quorums(3, 3, 2)
    assert config.quorums(lambda: None) == Quorums(3, 3, 2)
    resolved = topic_policies(Policies(persistence=Persistence(5, 3, 2, 9.0))).quorums
    assert resolved == Quorums(5, 3, 2)
    assert config.quorums(lambda: resolved) == Quorums(5, 3, 2)
