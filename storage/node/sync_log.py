"""Test-only record of the journal's durability points (power-loss simulation).

Owns: the side file named by ``FOLIO_TEST_SYNC_LOG`` (off when unset, the
default: ``SYNC_LOG`` is then None and the journal calls nothing). One line per
event, appended with ``O_APPEND`` (a killed node leaves every line it wrote):
``C <file>`` a journal file was created; ``W <file> <offset> <length>`` bytes are
about to be written (logged BEFORE the write, so a kill between the two can only
overstate what was unsynced); ``S <file> <end>`` an fdatasync returned that
covers every byte of ``<file>`` below ``<end>`` (logged AFTER it returned, and
``<end>`` is the offset when the sync job was taken, never more); ``D <dir>`` an
fsync of the directory returned (files created before it survive).
Rule: it observes and never changes what the journal does; the fault suite
(``folio.faults.powerloss``) reads it after a kill -9 to drop exactly what a
power cut would have dropped.
``FOLIO_TEST_SYNC_LAG_MS=D`` (honoured only together with the sync log) widens
the window a power cut can fall into: each journal fdatasync waits D ms first,
as the ``FOLIO_FAILPOINT_FSYNC_DELAY_MS`` failpoint does (journal_io.py), so
written-but-unsynced groups exist for a measurable share of the time. Acks still
wait for the fdatasync: the lag delays them, it never makes them earlier.
"""

from __future__ import annotations

import os
import threading

ENV = "FOLIO_TEST_SYNC_LOG"
LAG_ENV = "FOLIO_TEST_SYNC_LAG_MS"


class SyncLog:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()  # the loop thread and the sync thread both note

    def note(self, *fields: object) -> None:
        line = (" ".join(str(f) for f in fields) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)


def _from_env() -> SyncLog | None:
    path = os.environ.get(ENV, "")
    return SyncLog(path) if path else None


SYNC_LOG = _from_env()
SYNC_LAG_MS = int(os.environ.get(LAG_ENV, "0") or 0) if SYNC_LOG is not None else 0
