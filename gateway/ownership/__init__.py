"""Bundle ownership for gateways (docs/architecture.md §6, docs/compatibility.md §5).

Owns: namespace bundles and the topic -> bundle hash (``bundles``), the records
kept in etcd (``key_records``), gateway registration (``registry``), ownership,
lookup and unload of one gateway (``owner``), the elected load manager
(``load_manager``) and its pure decisions (``assign_core``).
Rule: a bundle is owned by holding its key in etcd under the gateway's lease,
created only by create-if-absent; ownership is a liveness fact, never mutual
exclusion - ledger fencing keeps a stale owner from writing.
"""

from gateway.ownership.assign_core import BalancePolicy
from gateway.ownership.bundles import BundleRange, NamespaceBundle, boundaries, bundle_for
from gateway.ownership.key_records import GatewayInfo, LoadReport
from gateway.ownership.load_manager import LoadManager
from gateway.ownership.owner import LossReason, OwnerInfo, OwnershipManager
from gateway.ownership.registry import GatewayRegistry

__all__ = [
    "BalancePolicy",
    "BundleRange",
    "GatewayInfo",
    "GatewayRegistry",
    "LoadManager",
    "LoadReport",
    "LossReason",
    "NamespaceBundle",
    "OwnerInfo",
    "OwnershipManager",
    "boundaries",
    "bundle_for",
]
