"""The gateway's connection cap leaves open files below its limit (gateway/security/file_budget.py)."""

from __future__ import annotations

import pytest

from gateway.security.file_budget import (
    FILES_CEILING,
    RESERVE_MIN,
    connection_cap,
    reserve,
    soft_limit_target,
)

pytestmark = pytest.mark.unit

INFINITY = 2**64 - 1


def test_a_connection_limit_equal_to_the_file_limit_is_capped_below_it() -> None:
    # the shape that reset a legitimate request: 20,000 connections allowed, 20,000 files
    cap = connection_cap(20_000, 20_000)
    assert cap == 18_000 and 20_000 - cap == reserve(20_000) == 2_000


def test_a_small_limit_keeps_at_least_the_minimum_reserve() -> None:
    assert reserve(1024) == RESERVE_MIN
    assert connection_cap(20_000, 1024) == 1024 - RESERVE_MIN
    assert connection_cap(100, 1024) == 100  # a smaller request stands
    assert connection_cap(100, 200) == 1  # never zero: the gateway still answers one


def test_zero_asked_means_as_many_as_the_files_allow() -> None:
    # main passes the file limit itself when --max-connections is 0
    assert connection_cap(4096, 4096) == 4096 - 409


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    assert soft_limit_target(1024, 524_288, INFINITY) == 524_288
    assert soft_limit_target(20_000, 20_000, INFINITY) == 20_000
    assert soft_limit_target(1024, INFINITY, INFINITY) == FILES_CEILING
    assert soft_limit_target(INFINITY, INFINITY, INFINITY) == INFINITY
    assert connection_cap(20_000, INFINITY) == 20_000
