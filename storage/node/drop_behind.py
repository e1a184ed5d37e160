"""Page-cache drop-behind for the journal files: the planning, no I/O (pure).

Owns: which byte ranges of which journal files have been written long enough ago
to be dropped from the page cache, and when a sealed file's fd may be closed.
Rules:
- a range is handed out only once it lies at least ``lag`` journal bytes behind
  the write position; the journal drops it on the sync thread *after* that sync
  job's fdatasync, so only written, durable pages are dropped (and dropping is
  advice: the kernel never discards dirty data for it);
- every byte of a file is handed out at most once, in order, in pieces of at
  least ``chunk`` bytes (a sealed file's last piece may be shorter);
- a sealed file's fd is released (to be closed) with its last range; at most
  ``sealed_max`` sealed files are held: beyond that the oldest is handed out
  whole at once, whatever the lag (small rotation sizes cannot pile up fds).
Why: keeping every appended page makes the page cache grow into memory it has
not used before, and on the reference box that costs the node several times
more kernel CPU per written byte than reusing pages it just freed (1 GiB of
128 KiB appends + fdatasync: 1.6-2.9 s of system CPU kept, 0.66 s dropped
behind; 3 nodes on one disk spent most of their CPU there in W1 at 1 KiB).
BookKeeper's journal does the same (``journalRemovePagesFromCache``). The last
``lag`` bytes stay cached, for readers just behind the tail.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

DROP_LAG_BYTES = 64 * 1024 * 1024  # the most recent journal bytes left in the page cache
DROP_CHUNK_BYTES = 4 * 1024 * 1024  # advice is given in pieces of at least this much
SEALED_MAX = 8  # sealed files whose fd is kept open for a later drop


@dataclass(slots=True)
class _File:
    fd: int
    start: int  # journal position (bytes since the writer started) of its offset 0
    dropped: int  # offset up to which its ranges were handed out
    end: int | None = None  # its size once sealed


Range = tuple[int, int, int]  # fd, offset, length


class DropBehind:
    def __init__(
        self, lag: int = DROP_LAG_BYTES, chunk: int = DROP_CHUNK_BYTES, sealed_max: int = SEALED_MAX
    ) -> None:
        assert lag >= 0 and chunk > 0 and sealed_max >= 0
        self.lag = lag
        self.chunk = chunk
        self.sealed_max = sealed_max
        self._files: deque[_File] = deque()

    def opened(self, fd: int, start: int, first_offset: int) -> None:
        """A new journal file at journal position ``start``; bytes before
        ``first_offset`` (its magic) are never handed out."""
        self._files.append(_File(fd, start, first_offset))

    def sealed(self, fd: int, size: int) -> None:
        """The newest file was rotated at ``size`` bytes; no more appends to it."""
        newest = self._files[-1]
        assert newest.fd == fd and newest.end is None
        newest.end = size

    def plan(self, position: int) -> tuple[list[Range], list[int]]:
        """With the journal written up to ``position``: the ranges to drop now and
        the sealed files' fds no longer needed."""
        limit = position - self.lag
        drops: list[Range] = []
        closes: list[int] = []
        files = self._files
        while files:
            f = files[0]
            if f.end is not None and len(files) - 1 > self.sealed_max:
                upto = f.end  # too many sealed files held: this one goes whole
            else:
                upto = limit - f.start if f.end is None else min(limit - f.start, f.end)
            if upto > f.dropped and (upto - f.dropped >= self.chunk or upto == f.end):
                drops.append((f.fd, f.dropped, upto - f.dropped))
                f.dropped = upto
            if f.end is not None and f.dropped >= f.end:
                closes.append(files.popleft().fd)
                continue
            break
        return drops, closes

    def fds(self) -> list[int]:
        """Every fd still held (sealed files not wholly dropped, and the newest)."""
        return [f.fd for f in self._files]
