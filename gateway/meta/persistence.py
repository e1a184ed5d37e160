"""Pulsar's namespace persistence policy: the quorums of the ledgers of a namespace's topics (pure).

Owns: ``Persistence`` (Pulsar ``PersistencePolicies``, stored as ``persistence``
in the namespace's ``Policies``) and its JSON parser.
Rules:
- the three quorums are required integers with
  1 <= bookkeeperAckQuorum <= bookkeeperWriteQuorum <= bookkeeperEnsemble <= ``ENSEMBLE_MAX``;
  a body that breaks this is an ``InvalidPolicy`` (400, Pulsar's "Invalid
  persistence policies") saying which field is wrong and why; unknown fields
  (``managedLedgerStorageClassName`` of newer Pulsars) are ignored;
- the quorums apply to the next ledger a topic of the namespace creates (its
  first, a rollover, the new ledger opened at a takeover); ledgers that exist
  keep theirs, as in Pulsar. Unset (``null``) means the gateway's ``LogConfig``;
- whether E storage nodes are writable is not checked here: a ledger that
  cannot find them fails to be created as any other (``not_enough_nodes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.meta.errors import InvalidPolicy
from gateway.meta.policy_fields import int_field, json_object, number_field

ENSEMBLE_MAX = 16  # storage nodes one ledger may span
MARK_DELETE_RATE_MAX = 1_000_000.0  # accepted for Pulsar clients, unused (see Persistence)
ENSEMBLE = "bookkeeperEnsemble"
WRITE_QUORUM = "bookkeeperWriteQuorum"
ACK_QUORUM = "bookkeeperAckQuorum"
MARK_DELETE_RATE = "managedLedgerMaxMarkDeleteRate"
# the start of every refusal of quorums out of order
ORDER_RULE = f"persistence needs 1 <= {ACK_QUORUM} <= {WRITE_QUORUM} <= {ENSEMBLE}"


@dataclass(frozen=True, slots=True)
class Persistence:
    """Ensemble size E, write quorum Qw and ack quorum Qa of a namespace's new ledgers.

    ``max_mark_delete_rate`` (Pulsar's ``managedLedgerMaxMarkDeleteRate``) is
    accepted, stored and returned so Pulsar clients round-trip it, but Folio
    does not use it: cursors are persisted to etcd in batches by
    compare-and-swap (docs/decisions/0005), not throttled to a rate."""

    ensemble: int
    write_quorum: int
    ack_quorum: int
    max_mark_delete_rate: float = 0.0

    def __post_init__(self) -> None:
        check_quorums(self.ensemble, self.write_quorum, self.ack_quorum)

    def to_json(self) -> dict[str, Any]:
        return {
            ENSEMBLE: self.ensemble,
            WRITE_QUORUM: self.write_quorum,
            ACK_QUORUM: self.ack_quorum,
            MARK_DELETE_RATE: self.max_mark_delete_rate,
        }

    @classmethod
    def from_json(cls, value: Any) -> Persistence:
        """Body of POST …/persistence (and the stored ``persistence`` field)."""
        obj = json_object(value, "persistence")
        ensemble, write, ack = (_quorum(obj.get(name), name) for name in (ENSEMBLE, WRITE_QUORUM, ACK_QUORUM))
        raw_rate = obj.get(MARK_DELETE_RATE)
        rate = 0.0 if raw_rate is None else number_field(raw_rate, MARK_DELETE_RATE, 0, MARK_DELETE_RATE_MAX)
        return cls(ensemble, write, ack, rate)


def _quorum(value: Any, name: str) -> Any:
    """The raw value of a required quorum (``check_quorums`` validates it)."""
    if value is None:
        raise InvalidPolicy(f"persistence needs {name}, an integer from 1 to {ENSEMBLE_MAX}")
    return value


def check_quorums(ensemble: int, write: int, ack: int) -> None:
    """Refuse quorums outside 1 <= Qa <= Qw <= E <= ``ENSEMBLE_MAX``, naming the broken link."""
    for name, number in ((ENSEMBLE, ensemble), (WRITE_QUORUM, write), (ACK_QUORUM, ack)):
        int_field(number, name, 1, ENSEMBLE_MAX)
    if write > ensemble:
        raise InvalidPolicy(f"{ORDER_RULE}: {WRITE_QUORUM} {write} is more than {ENSEMBLE} {ensemble}")
    if ack > write:
        raise InvalidPolicy(f"{ORDER_RULE}: {ACK_QUORUM} {ack} is more than {WRITE_QUORUM} {write}")
