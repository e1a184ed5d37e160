"""Process-wide settings for long-running Folio processes (storage nodes, the
auditor, anything that embeds the ledger client on its hot path).

Owns: the cyclic garbage collector's schedule. Rule: the hot paths allocate
many short-lived, acyclic objects (bytes, tuples, futures) that reference
counting frees at once; with the default thresholds the collector still runs
full passes over every long-lived object (indexes, caches) often enough to
stall a process for tens of milliseconds — measured as most of the add
latency tail. So: move everything alive after start-up out of the collector's
view (``gc.freeze``) and collect young objects far less often. Cycles are
still collected.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 200_000  # allocations between young-generation collections (default 700)
MIDDLE_THRESHOLD = 50
OLD_THRESHOLD = 1_000


def tune_gc() -> None:
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
