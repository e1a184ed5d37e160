"""Give freed heap memory back to the operating system after delivery bursts (glibc only).

Owns: one periodic task per gateway process. Rule: a burst of deliveries to
many consumers allocates and frees many frame-sized blocks (1-64 KiB) between
long-lived small objects; glibc keeps the freed pages mapped, so a gateway that
served one burst of 300 KiB to 1,000 consumers kept ~700 MiB resident long
after the frames were gone. Every ``INTERVAL_S``, if deliveries happened since
the last look, ``malloc_trim(0)`` returns whole free pages (it runs without
the GIL: the event loop and the lease thread go on). Elsewhere it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

INTERVAL_S = 1.0


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


async def trim_heap_after_bursts(activity: Callable[[], int], interval_s: float = INTERVAL_S) -> None:
    """Run until cancelled: trim the heap whenever ``activity()`` (a counter) moved."""
    trim = _malloc_trim()
    if trim is None:
        return
    seen = activity()
    while True:
        await asyncio.sleep(interval_s)
        now = activity()
        if now != seen:
            seen = now
            await asyncio.to_thread(trim, 0)
