"""Decoded copies of the ownership, assignment and unload-request caches (pure).

Owns: ``OwnershipView`` - who holds which bundle (with the key's mod_revision),
the load manager's pending assignments and the pending unload requests - built
from ``WatchedPrefix`` entries one changed key at a time (or wholesale after a
re-listing), plus the queries lookup needs (owner of a hash, bundle counts).
Rule: it only mirrors etcd as the watches deliver it (it may lag); nothing here
decides ownership. Keys that do not parse as bundle keys, and values that do not
decode, are ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from coordination import keys
from coordination.prefix_view import Entry
from gateway.names import NamespaceName
from gateway.ownership.bundles import BundleRange, NamespaceBundle
from gateway.ownership.key_records import Assignment, UnloadRequest, bundle_of_key, decode_owner


class OwnershipView:
    def __init__(self) -> None:
        self.owners: dict[NamespaceName, dict[BundleRange, tuple[str, int]]] = {}
        self.assignments: dict[NamespaceBundle, tuple[Assignment, int]] = {}
        self.unloads: dict[NamespaceBundle, tuple[UnloadRequest, int]] = {}

    # -- updates: ``key`` None means "re-listed: rebuild from ``entries``" ------------------

    def update_owners(self, entries: Mapping[str, Entry], key: str | None) -> list[NamespaceBundle]:
        """Apply a change under ``keys.BUNDLES``; returns the bundles touched."""
        if key is None:
            self.owners = {}
        touched = []
        for k, nb in _bundle_keys(keys.BUNDLES, entries, key):
            touched.append(nb)
            entry = entries.get(k)
            owner = decode_owner(entry.value) if entry is not None else None
            ranges = self.owners.setdefault(nb.namespace, {})
            if entry is None or owner is None:
                ranges.pop(nb.range, None)
                if not ranges:
                    del self.owners[nb.namespace]
            else:
                ranges[nb.range] = (owner, entry.mod_revision)
        return touched

    def update_assignments(self, entries: Mapping[str, Entry], key: str | None) -> list[NamespaceBundle]:
        """Apply a change under ``keys.BUNDLE_ASSIGN``; returns the bundles now assigned."""
        self.assignments, present = _records(
            keys.BUNDLE_ASSIGN, Assignment.decode, self.assignments, entries, key
        )
        return present

    def update_unloads(self, entries: Mapping[str, Entry], key: str | None) -> list[NamespaceBundle]:
        """Apply a change under ``keys.BUNDLE_UNLOAD``; returns the bundles with a request now."""
        self.unloads, present = _records(keys.BUNDLE_UNLOAD, UnloadRequest.decode, self.unloads, entries, key)
        return present

    # -- queries --------------------------------------------------------------------------

    def owner_of_hash(self, ns: NamespaceName, hash_value: int) -> tuple[NamespaceBundle, str] | None:
        for r, (owner, _) in self.owners.get(ns, {}).items():
            if r.contains(hash_value):
                return NamespaceBundle(ns, r), owner
        return None

    def owner(self, bundle: NamespaceBundle) -> str | None:
        held = self.owners.get(bundle.namespace, {}).get(bundle.range)
        return held[0] if held else None

    def bundle_owners(self) -> dict[NamespaceBundle, str]:
        return {
            NamespaceBundle(ns, r): owner for ns, rs in self.owners.items() for r, (owner, _) in rs.items()
        }

    def assigned_to(self, bundle: NamespaceBundle) -> str | None:
        assigned = self.assignments.get(bundle)
        return assigned[0].gateway_id if assigned else None

    def counts(self, mine: Iterable[NamespaceBundle], me: str) -> dict[str, int]:
        """Bundles per gateway: held keys (``mine`` counted as ``me`` even if the cache lags)
        plus pending assignments of bundles nobody holds."""
        holders = self.bundle_owners()
        holders.update(dict.fromkeys(mine, me))
        for bundle, (assignment, _) in self.assignments.items():
            if self.owner_of_hash(bundle.namespace, bundle.range.lo) is None:
                holders.setdefault(bundle, assignment.gateway_id)
        counts: dict[str, int] = {}
        for owner in holders.values():
            counts[owner] = counts.get(owner, 0) + 1
        return counts


def _bundle_keys(
    prefix: str, entries: Mapping[str, Entry], key: str | None
) -> Iterable[tuple[str, NamespaceBundle]]:
    for k in list(entries) if key is None else [key]:
        nb = bundle_of_key(prefix, k)
        if nb is not None:
            yield k, nb


R = TypeVar("R")


def _records(
    prefix: str,
    decode: Callable[[bytes], R | None],
    held: dict[NamespaceBundle, tuple[R, int]],
    entries: Mapping[str, Entry],
    key: str | None,
) -> tuple[dict[NamespaceBundle, tuple[R, int]], list[NamespaceBundle]]:
    """A change under ``prefix`` applied to ``held`` (a new map when ``key`` is None, the
    whole prefix listed again): each bundle's decoded record and the key's revision, an
    undecodable or deleted one dropped. Returns the map and the bundles now present."""
    if key is None:
        held = {}
    present = []
    for k, nb in _bundle_keys(prefix, entries, key):
        entry = entries.get(k)
        record = decode(entry.value) if entry is not None else None
        if entry is None or record is None:
            held.pop(nb, None)
        else:
            held[nb] = (record, entry.mod_revision)
            present.append(nb)
    return held, present
