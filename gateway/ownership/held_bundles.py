"""The bundles one gateway holds, and when it has lost one (pure).

Owns: ``HeldBundles``, the local table namespace -> range -> ``mod_revision``
of this gateway's ownership key (and ``generation``, which every change of it
moves on, so a topic's epoch found once holds until it moves), ``LossReason``
and ``lost_bundles``.
Rules (docs/architecture.md §6):
- a held bundle's ownership epoch is the ``mod_revision`` of our key for it;
  etcd revisions only grow, so a later owner's epoch is always higher;
- a loss names the revision it is about (None: every revision, a lost lease):
  a loss of an older key never drops the bundle held under a newer one;
- a bundle is lost when the watched cache of ownership keys, at or past the
  revision of our key, no longer holds that key at that revision; a cache
  behind our write says nothing yet.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from coordination.prefix_view import Entry
from gateway.names import NamespaceName, TopicName
from gateway.ownership.bundles import BundleRange, NamespaceBundle, topic_hash
from gateway.ownership.key_records import owner_key


class LossReason(enum.Enum):
    RELEASED = "released"  # release()/release_all() by this gateway
    UNLOADED = "unloaded"  # released after an unload request
    DELETED = "deleted"  # the key disappeared under us (deleted by someone else)
    LEASE_LOST = "lease_lost"  # the gateway's lease is gone: every bundle at once


class HeldBundles:
    def __init__(self) -> None:
        self._held: dict[NamespaceName, dict[BundleRange, int]] = {}
        self.generation = 0  # moves on with every change of the table

    def all(self) -> list[NamespaceBundle]:
        """Every held bundle, sorted."""
        return sorted(NamespaceBundle(ns, r) for ns, ranges in self._held.items() for r in ranges)

    def revision(self, nb: NamespaceBundle) -> int | None:
        """The revision of our key for ``nb`` (its epoch); None: not held."""
        return self._held.get(nb.namespace, {}).get(nb.range)

    def holds(self, nb: NamespaceBundle) -> bool:
        return nb.range in self._held.get(nb.namespace, {})

    def covering(self, ns: NamespaceName, key_hash: int) -> tuple[BundleRange, int] | None:
        """The held range of ``ns`` containing ``key_hash``, with its revision."""
        ranges = self._held.get(ns)
        if not ranges:
            return None
        return next(((r, revision) for r, revision in ranges.items() if r.contains(key_hash)), None)

    def of_topic(self, topic: TopicName) -> tuple[NamespaceBundle, int] | None:
        """The held bundle containing ``topic``, with its revision."""
        found = self.covering(topic.namespace_name, topic_hash(str(topic)))
        return None if found is None else (NamespaceBundle(topic.namespace_name, found[0]), found[1])

    def add(self, nb: NamespaceBundle, revision: int) -> None:
        self._held.setdefault(nb.namespace, {})[nb.range] = revision
        self.generation += 1

    def add_if_absent(self, nb: NamespaceBundle, revision: int) -> None:
        ranges = self._held.setdefault(nb.namespace, {})
        if nb.range not in ranges:
            ranges[nb.range] = revision
            self.generation += 1

    def remove(self, nb: NamespaceBundle, revision: int | None) -> bool:
        """Drop ``nb`` if held (under ``revision``, unless None); True if it was dropped."""
        ranges = self._held.get(nb.namespace, {})
        if nb.range not in ranges or (revision is not None and ranges[nb.range] != revision):
            return False
        del ranges[nb.range]
        if not ranges:
            self._held.pop(nb.namespace, None)
        self.generation += 1
        return True


def lost_bundles(
    held: HeldBundles, check: Iterable[NamespaceBundle], entries: Mapping[str, Entry], revision: int
) -> list[tuple[NamespaceBundle, int]]:
    """The bundles of ``check`` that are held but lost, with the revision they were held
    under: the cache (``entries`` as of ``revision``) has seen our key and no longer holds it."""
    lost: list[tuple[NamespaceBundle, int]] = []
    for nb in check:
        mine = held.revision(nb)
        if mine is None or revision < mine:
            continue  # not held, or the cache has not seen our write yet
        entry = entries.get(owner_key(nb))
        if entry is None or entry.mod_revision != mine:
            lost.append((nb, mine))
    return lost
