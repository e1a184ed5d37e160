"""Invariant checkers of one simulated ledger (the "oracle" of the simulation).

Owns: what the test knows to be true independently of the cores under test:
what the writer appended and was told is confirmed, what each node answered
(seen on the wire: acks of normal adds, fence replies), every metadata change
the clients made, what each node holds at the end, and what readers returned.
Rules checked (docs/architecture.md §11, docs/testing.md §3, docs/compatibility.md §6.5):
- the writer's LAC and every node's LAC never decrease (a node's across restarts);
- a node that replied OK to a fence never acks a normal add of that ledger that
  arrived after the reply (the fence is durable and survives restarts);
- readers never return an entry past the writer's LAC while the ledger is OPEN,
  nor past ``last_entry_id`` once it is CLOSED, and only the writer's bytes;
- once CLOSED, ``last_entry_id`` never changes and every confirmed entry is <= it;
- at the end, entries 0..last_entry_id are all readable, in order, byte-identical
  to what the writer appended (so every confirmed add survived recovery, in
  order), and
  each is stored on at least Qa members of its write set (confirmed entries were
  acked by Qa of them; recovery wrote the tail back to Qa of them).
Violations are collected, not raised, so the control run can count them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from storage.types import NO_ENTRY, LedgerMetadata, LedgerState

VIOLATIONS_MAX = 50  # one broken rule tends to repeat; keep the report readable


class Checker:
    def __init__(self, ledger_id: int, now_ms: Callable[[], int]) -> None:
        self.ledger_id = ledger_id
        self._now = now_ms
        self.violations: list[str] = []
        self.appended: dict[int, bytes] = {}  # entry id -> payload, as the writer appended it
        self.writer_lac = NO_ENTRY
        self.writer_lac_at: dict[int, int] = {}  # confirmed LAC -> when it was confirmed
        self.node_lac: dict[str, int] = {}
        self.fence_replied: dict[str, int] = {}  # node -> time of its first fence OK
        self.closed_last: int | None = None
        self.reader_seen: dict[int, bytes] = {}
        self.normal_acks = 0
        self.fence_replies = 0

    def fail(self, message: str) -> None:
        if len(self.violations) < VIOLATIONS_MAX:
            self.violations.append(f"t={self._now()}ms {message}")

    # ------------------------------------------------------------ writer

    def writer_appended(self, entry_id: int, payload: bytes) -> None:
        if entry_id in self.appended or entry_id != len(self.appended):
            self.fail(f"writer assigned entry id {entry_id} after {len(self.appended)} appends")
        self.appended[entry_id] = payload

    def writer_confirmed(self, lac: int) -> None:
        if lac <= self.writer_lac:
            self.fail(f"writer LAC went from {self.writer_lac} to {lac}")
        if lac >= len(self.appended):
            self.fail(f"writer confirmed {lac} but only {len(self.appended)} entries were appended")
        if self.closed_last is not None and lac > self.closed_last:
            self.fail(f"LOSS: writer confirmed {lac} after the ledger was closed at {self.closed_last}")
        self.writer_lac = max(self.writer_lac, lac)
        self.writer_lac_at[lac] = self._now()

    # ------------------------------------------------------------ nodes

    def node_acked_add(self, node: str, entry_id: int, recovery: bool, after_fence: bool) -> None:
        """``after_fence``: the add arrived after ``node`` had sent a fence reply."""
        if recovery:
            return
        self.normal_acks += 1
        if after_fence:
            self.fail(
                f"{node} acked normal add {entry_id} after replying to a fence "
                f"at t={self.fence_replied[node]}ms (fenced ledger took its old writer)"
            )

    def node_fence_replied(self, node: str) -> None:
        self.fence_replies += 1
        self.fence_replied.setdefault(node, self._now())

    def node_lacs(self, lacs: Iterable[tuple[str, int]]) -> None:
        for node, lac in lacs:
            before = self.node_lac.get(node, NO_ENTRY)
            if lac < before:
                self.fail(f"{node} LAC went back from {before} to {lac}")
            self.node_lac[node] = lac  # report each decrease once

    # ------------------------------------------------------------ metadata and readers

    def metadata(self, md: LedgerMetadata | None) -> None:
        if md is None:
            self.fail("the ledger's metadata disappeared")
            return
        if md.state is not LedgerState.CLOSED:
            if self.closed_last is not None:
                self.fail(f"ledger metadata went back to {md.state.value} after it was CLOSED")
            return
        if self.closed_last is None:
            self.closed_last = md.last_entry_id
            if md.last_entry_id < self.writer_lac:
                self.fail(
                    f"LOSS: ledger closed at {md.last_entry_id} below the writer's LAC {self.writer_lac}"
                )
        elif md.last_entry_id != self.closed_last:
            self.fail(f"closed ledger's last entry moved from {self.closed_last} to {md.last_entry_id}")

    def reader_returned(self, reader: str, entry_id: int, entry: bytes, closed: bool) -> None:
        if closed:
            if self.closed_last is None or entry_id > self.closed_last:
                self.fail(f"{reader} returned {entry_id} past the closed ledger's end {self.closed_last}")
        elif entry_id > self.writer_lac:
            self.fail(f"{reader} returned {entry_id} past the writer's LAC {self.writer_lac}")
        if entry != self.appended.get(entry_id):
            self.fail(f"{reader} returned entry {entry_id} with bytes other than the writer's")
        seen = self.reader_seen.setdefault(entry_id, entry)
        if seen != entry:
            self.fail(f"{reader} returned entry {entry_id} with bytes another read saw differently")

    # ------------------------------------------------------------ end of run

    def final(self, md: LedgerMetadata | None, read_back: dict[int, bytes], read_complete: bool) -> None:
        """Entries 0..last of the closed ledger were all read back, and they are the writer's."""
        if md is None or md.state is not LedgerState.CLOSED:
            self.fail(f"recovery never closed the ledger (state {md and md.state})")
            return
        last = md.last_entry_id
        if last < self.writer_lac:
            self.fail(f"LOSS: closed at {last}, the writer had confirmed up to {self.writer_lac}")
        if last >= len(self.appended):
            self.fail(f"closed at {last} but the writer appended only {len(self.appended)} entries")
        missing = [e for e in range(last + 1) if e not in read_back]
        lost = [e for e in missing if e <= self.writer_lac]
        if lost:
            self.fail(f"LOSS: confirmed entries unreadable after recovery: {lost[:10]} ({len(lost)} in all)")
        elif missing or not read_complete:
            self.fail(
                f"read-back of 0..{last} incomplete (a gap in the closed ledger): missing {missing[:10]}"
            )
        for entry_id in sorted(read_back):
            if entry_id > last:
                self.fail(f"read-back returned {entry_id} past the end {last}")
            elif read_back[entry_id] != self.appended.get(entry_id):
                self.fail(f"read-back entry {entry_id} differs from what the writer appended")
        for entry_id, entry in sorted(self.reader_seen.items()):
            if entry_id > last:
                self.fail(f"a reader saw entry {entry_id}, which is not in the closed ledger (last {last})")
            elif read_back.get(entry_id, entry) != entry:
                self.fail(f"a reader saw entry {entry_id} with bytes the closed ledger does not have")

    def replicated(self, md: LedgerMetadata | None, stored: dict[str, set[int]]) -> None:
        """Every entry of the closed ledger is on >= Qa members of its write set."""
        if md is None or md.state is not LedgerState.CLOSED:
            return
        thin = []
        for entry_id in range(md.last_entry_id + 1):
            copies = sum(1 for node in md.write_set(entry_id) if entry_id in stored.get(node, ()))
            if copies < md.ack_quorum:
                thin.append((entry_id, copies))
        if thin:
            self.fail(f"under-replicated entries of the closed ledger (entry, copies): {thin[:10]}")
