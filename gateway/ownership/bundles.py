"""Namespace bundles: hash ranges of topic names (pure).

Owns: the bundle boundaries of a namespace, ``BundleRange`` (one hash range and
its Pulsar name ``0x%08x_0x%08x``), ``NamespaceBundle`` (a range inside a
namespace, the unit a gateway owns) and the topic -> bundle mapping.
Rule (docs/compatibility.md §5.1): the hash space ``[0, 0xffffffff]`` is cut into N
ranges of step ``2**32 // N``, the last boundary being ``0xffffffff``; ranges
are ``[lo, hi)`` except the last, which is ``[lo, 0xffffffff]``. A topic's hash
is CRC-32 (IEEE, ``zlib.crc32``) of its full name ``persistent://t/ns/topic``
as UTF-8; every partition (``…-partition-N``) hashes on its own.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.names import InvalidName, NamespaceName, TopicName

HASH_MAX = 0xFFFFFFFF
DEFAULT_NUM_BUNDLES = 4  # defaultNumberOfNamespaceBundles
MAX_NUM_BUNDLES = 128


def _check_count(n: int) -> int:
    if not 1 <= n <= MAX_NUM_BUNDLES:
        raise InvalidName(f"number of bundles must be 1..{MAX_NUM_BUNDLES}, not {n}")
    return n


def boundaries(n: int) -> list[int]:
    """The N + 1 boundaries of N equal bundles: ``0, step, 2*step, …, 0xffffffff``."""
    _check_count(n)
    step = (HASH_MAX + 1) // n
    return [i * step for i in range(n)] + [HASH_MAX]


def topic_hash(topic_full_name: str) -> int:
    """CRC-32 (IEEE) of the full topic name, unsigned."""
    return zlib.crc32(topic_full_name.encode("utf-8")) & HASH_MAX


@dataclass(frozen=True, slots=True, order=True)
class BundleRange:
    """Hash range ``[lo, hi)``; a range ending at 0xffffffff also includes it."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not 0 <= self.lo < self.hi <= HASH_MAX:
            raise InvalidName(f"bad bundle range 0x{self.lo:x}..0x{self.hi:x}")

    @property
    def name(self) -> str:
        return f"0x{self.lo:08x}_0x{self.hi:08x}"

    @classmethod
    def parse(cls, name: str) -> BundleRange:
        """``0x00000000_0x40000000`` -> BundleRange(0, 0x40000000)."""
        lo, sep, hi = name.partition("_")
        try:
            if (
                not sep
                or not lo.startswith("0x")
                or not hi.startswith("0x")
                or len(lo) != 10
                or len(hi) != 10
            ):
                raise ValueError(name)
            return cls(int(lo, 16), int(hi, 16))
        except ValueError:
            raise InvalidName(f"Invalid bundle {name[:40]!r}: expected 0x%08x_0x%08x") from None

    def contains(self, hash_value: int) -> bool:
        return self.lo <= hash_value < self.hi or (self.hi == HASH_MAX and hash_value == HASH_MAX)

    def __str__(self) -> str:
        return self.name


def bundle_ranges(n: int) -> list[BundleRange]:
    edges = boundaries(n)
    return [BundleRange(edges[i], edges[i + 1]) for i in range(n)]


def bundle_for_hash(hash_value: int, n: int) -> BundleRange:
    edges = boundaries(n)
    step = edges[1]  # == 2**32 // n
    index = min(hash_value // step, n - 1)
    return BundleRange(edges[index], edges[index + 1])


def bundle_in(hash_value: int, edges: Sequence[int]) -> BundleRange:
    """The range holding ``hash_value`` among explicit boundaries (a namespace's policies
    ``bundles.boundaries``: increasing, from 0 to 0xffffffff)."""
    if len(edges) < 2 or edges[0] != 0 or edges[-1] != HASH_MAX:
        raise InvalidName("bundle boundaries must run from 0x00000000 to 0xffffffff")
    index = min(bisect.bisect_right(edges, hash_value) - 1, len(edges) - 2)
    return BundleRange(edges[index], edges[index + 1])


def bundle_for(topic_full_name: str, n: int | Sequence[int]) -> BundleRange:
    """The bundle of ``persistent://t/ns/topic`` when its namespace has ``n`` equal bundles
    (or, given a sequence, these bundle boundaries)."""
    h = topic_hash(topic_full_name)
    return bundle_for_hash(h, n) if isinstance(n, int) else bundle_in(h, n)


@dataclass(frozen=True, slots=True, order=True)
class NamespaceBundle:
    """One bundle of one namespace: what a gateway owns. ``path`` is ``t/ns/0xlo_0xhi``,
    the suffix of its keys under ``keys.BUNDLES`` and friends."""

    namespace: NamespaceName
    range: BundleRange

    @classmethod
    def of_topic(cls, topic: TopicName, n: int | Sequence[int]) -> NamespaceBundle:
        return cls(topic.namespace_name, bundle_for(str(topic), n))

    @property
    def path(self) -> str:
        return f"{self.namespace.tenant}/{self.namespace.namespace}/{self.range.name}"

    @classmethod
    def parse_path(cls, path: str) -> NamespaceBundle:
        parts = path.split("/")
        if len(parts) != 3:
            raise InvalidName(f"Invalid bundle path {path[:80]!r}: expected tenant/namespace/0xlo_0xhi")
        return cls(NamespaceName.of(parts[0], parts[1]), BundleRange.parse(parts[2]))

    def contains(self, topic: TopicName) -> bool:
        return topic.namespace_name == self.namespace and self.range.contains(topic_hash(str(topic)))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range.name}"
