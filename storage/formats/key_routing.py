"""Which partition of a partitioned topic a keyed message goes to (pure).

Owns: ``java_string_hash`` and ``partition_of_key`` (Murmur3 is
``storage.formats.key_hash.murmur3_32``). Rule (Pulsar's Java
client): ``JavaStringHash`` (the default) is ``String.hashCode`` masked to
non-negative, then modulo the partition count; ``Murmur3_32Hash`` is Murmur3
x86 32-bit, seed 0, masked the same way. Every publisher of a key - a gateway
routing a REST or WebSocket publish, or Spark writing rows - picks the same
partition, so a key's messages stay in order on one partition.
"""

from __future__ import annotations

from storage.formats.key_hash import murmur3_32


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_of_key(key: str, partitions: int, scheme: str = "JavaStringHash") -> int:
    if scheme == "Murmur3_32Hash":
        return (murmur3_32(key.encode()) & 0x7FFFFFFF) % partitions
    # Java client (JavaStringHash + RoundRobinPartitionMessageRouterImpl): hashCode masked to
    # non-negative, then signSafeMod - not abs(hashCode), which differs for negative hash codes
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions
