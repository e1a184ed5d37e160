"""A gateway's throughput history: a ring of samples bounded in bytes (pure).

Owns: ``ThroughputRing`` - one fixed-size record per sample (publish time in ms,
messages in/s and out/s of the topics this gateway owns) packed into a
``bytearray`` allocated once, so the history never holds more than its byte
budget: the oldest sample is overwritten when it is full - and
``merge``, which adds several gateways' samples into one cluster series on
shared time buckets. Rules: the caller passes the time (``now_ms``); samples
are kept in the order offered; a sample older than the newest one is refused
(clocks do not run backwards in a ring); nothing here does I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

RECORD = struct.Struct("<qdd")  # t_ms, msgRateIn, msgRateOut
RING_BYTES_DEFAULT = 64 * 1024  # 2,730 samples: 3.8 h at one sample per 5 s load report
BUCKET_MS_DEFAULT = 5_000


class ThroughputRing:
    """At most ``max_bytes // RECORD.size`` samples, in ``max_bytes`` bytes."""

    def __init__(self, max_bytes: int = RING_BYTES_DEFAULT) -> None:
        if max_bytes < RECORD.size:
            raise ValueError(f"a throughput ring needs at least {RECORD.size} bytes, got {max_bytes}")
        self.capacity = max_bytes // RECORD.size
        self._buf = bytearray(self.capacity * RECORD.size)
        self._start = 0  # index of the oldest sample
        self._count = 0
        self._newest_ms: int | None = None

    @property
    def nbytes(self) -> int:
        """Bytes the samples occupy (fixed at creation)."""
        return len(self._buf)

    def __len__(self) -> int:
        return self._count

    def offer(self, now_ms: int, rate_in: float, rate_out: float) -> bool:
        """Add a sample; False (nothing kept) if it is older than the newest one."""
        if self._newest_ms is not None and now_ms < self._newest_ms:
            return False
        index = (self._start + self._count) % self.capacity
        if self._count == self.capacity:
            self._start = (self._start + 1) % self.capacity
        else:
            self._count += 1
        RECORD.pack_into(self._buf, index * RECORD.size, now_ms, float(rate_in), float(rate_out))
        self._newest_ms = now_ms
        return True

    def samples(self, since_ms: int = 0) -> list[dict[str, Any]]:
        """Samples at or after ``since_ms``, oldest first, as ``{t, msgRateIn, msgRateOut}``."""
        out = []
        for i in range(self._count):
            offset = ((self._start + i) % self.capacity) * RECORD.size
            t, rate_in, rate_out = RECORD.unpack_from(self._buf, offset)
            if t >= since_ms:
                out.append({"t": t, "msgRateIn": rate_in, "msgRateOut": rate_out})
        return out


def merge(
    series: Mapping[str, Iterable[Mapping[str, Any]]], now_ms: int, bucket_ms: int = BUCKET_MS_DEFAULT
) -> list[dict[str, Any]]:
    """One cluster series from each gateway's samples: every sample falls in the
    ``bucket_ms`` bucket of its time; a bucket's rate is the sum over gateways of
    each gateway's mean rate in it (a gateway that sampled twice in one bucket
    counts once). Only buckets that ended by ``now_ms``: in the current one some
    gateways have not reported yet, and its sum would dip. Buckets oldest first,
    each with the gateways that reported."""
    buckets: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for gateway_id, samples in series.items():
        for s in samples:
            try:
                t, rate_in, rate_out = int(s["t"]), float(s["msgRateIn"]), float(s["msgRateOut"])
            except (KeyError, TypeError, ValueError):
                continue  # a malformed sample from a peer is left out, not fatal
            bucket = t - t % bucket_ms
            if bucket + bucket_ms > now_ms:
                continue
            buckets.setdefault(bucket, {}).setdefault(gateway_id, []).append((rate_in, rate_out))
    out = []
    for bucket in sorted(buckets):
        per_gateway = buckets[bucket]
        rate_in = sum(sum(v[0] for v in vs) / len(vs) for vs in per_gateway.values())
        rate_out = sum(sum(v[1] for v in vs) / len(vs) for vs in per_gateway.values())
        out.append(
            {
                "t": bucket,
                "msgRateIn": round(rate_in, 3),
                "msgRateOut": round(rate_out, 3),
                "gateways": len(per_gateway),
            }
        )
    return out
