"""Journal page-cache drop-behind planning (storage/node/drop_behind.py)."""

from __future__ import annotations

import random

import pytest

from storage.node.drop_behind import DropBehind

pytestmark = pytest.mark.unit

MAGIC = 8


def test_nothing_until_lag_behind_then_pieces_of_at_least_chunk() -> None:
    plan = DropBehind(lag=100, chunk=10)
    plan.opened(fd=3, start=0, first_offset=MAGIC)
    assert plan.plan(100) == ([], [])  # nothing is 100 bytes behind yet
    assert plan.plan(100 + MAGIC + 9) == ([], [])  # 9 bytes could go: less than a chunk
    assert plan.plan(100 + MAGIC + 10) == ([(3, MAGIC, 10)], [])
    assert plan.plan(100 + MAGIC + 10) == ([], [])  # never twice
    assert plan.plan(500) == ([(3, MAGIC + 10, 500 - 100 - MAGIC - 10)], [])
    assert plan.fds() == [3]


def test_sealed_file_ends_with_a_short_piece_and_releases_its_fd() -> None:
    plan = DropBehind(lag=50, chunk=40)
    plan.opened(fd=3, start=0, first_offset=MAGIC)
    plan.sealed(fd=3, size=70)
    plan.opened(fd=4, start=70, first_offset=MAGIC)
    assert plan.plan(50 + 48) == ([(3, MAGIC, 40)], [])
    assert plan.plan(50 + 60) == ([], [])  # 12 more bytes of file 3: short of a chunk, not its end
    # file 3 can go to its end (a short last piece), then file 4 is looked at
    assert plan.plan(50 + 70 + MAGIC + 40) == ([(3, 48, 22), (4, MAGIC, 40)], [3])
    assert plan.fds() == [4]


def test_at_most_sealed_max_sealed_files_are_held_whatever_the_lag() -> None:
    plan = DropBehind(lag=10**9, chunk=10, sealed_max=2)
    start = 0
    for fd in range(10, 16):
        plan.opened(fd, start, MAGIC)
        plan.sealed(fd, 100)
        start += 100
    plan.opened(16, start, MAGIC)
    drops, closes = plan.plan(start + MAGIC)
    assert closes == [10, 11, 12, 13]  # whole, although far from lag bytes behind
    assert drops == [(fd, MAGIC, 100 - MAGIC) for fd in closes]
    assert plan.fds() == [14, 15, 16]


def test_random_writes_each_byte_once_in_order_and_only_lag_behind() -> None:
    rng = random.Random(7)
    lag, chunk = 300, 64
    plan = DropBehind(lag=lag, chunk=chunk, sealed_max=1000)
    sizes: dict[int, int] = {}
    starts: dict[int, int] = {}
    fd, start, offset = 100, 0, MAGIC
    plan.opened(fd, start, MAGIC)
    starts[fd] = start
    covered: dict[int, int] = {}  # fd -> end of what was handed out
    for _ in range(2000):
        offset += rng.randint(1, 90)
        if offset > 1000:
            plan.sealed(fd, offset)
            sizes[fd] = offset
            start += offset
            fd, offset = fd + 1, MAGIC
            plan.opened(fd, start, MAGIC)
            starts[fd] = start
        position = start + offset
        drops, closes = plan.plan(position)
        for f, off, length in drops:
            assert off == covered.get(f, MAGIC)  # contiguous, never twice
            assert length >= chunk or off + length == sizes.get(f)
            assert starts[f] + off + length <= position - lag  # only lag behind the writes
            covered[f] = off + length
        for f in closes:
            assert covered[f] == sizes[f]  # released only once wholly handed out
    assert len(plan.fds()) <= 3
