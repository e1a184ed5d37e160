"""The decoded-entry cache of a topic (gateway/broker/decoded_entries.py) stays within its
bounds in entries, messages and bytes, whatever the entries hold."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gateway.broker import decoded_entries as decoded_module
from gateway.broker.decoded_entries import DecodedEntries
from gateway.broker.managed_log import ManagedLog
from storage.formats.entry_format import EntryMessage, encode_entry
from storage.formats.positions import Position

pytestmark = pytest.mark.unit


def entry(messages: int, size: int = 10) -> bytes:
    return encode_entry([EntryMessage(b"x" * size, 1_700_000_000_000, "p", i) for i in range(messages)])


def cache() -> DecodedEntries:
    return DecodedEntries(cast(ManagedLog, cast(Any, object())))  # messages() never touches the log


def test_full_batches_are_bounded_by_messages_not_entries() -> None:
    entries = cache()
    big = entry(1000)
    for e in range(200):  # 200,000 messages in 200 entries: far below the entry bound
        entries.messages(Position(1, e), big)
    held_entries, held_messages, _ = entries.held
    assert held_messages <= decoded_module.DECODED_CACHE_MESSAGES
    assert held_entries == decoded_module.DECODED_CACHE_MESSAGES // 1000
    assert entries.cached_messages(Position(1, 199)) is not None  # the newest stay


def test_large_payloads_are_bounded_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decoded_module, "DECODED_CACHE_BYTES", 1 << 20)
    entries = cache()
    payload = entry(1, 100 * 1024)
    for e in range(50):
        entries.messages(Position(1, e), payload)
    _, _, held_bytes = entries.held
    assert held_bytes <= 1 << 20
    assert entries.held[0] == (1 << 20) // len(payload)


def test_small_entries_are_bounded_by_count() -> None:
    entries = cache()
    one = entry(1)
    for e in range(decoded_module.DECODED_CACHE_ENTRIES + 100):
        entries.messages(Position(1, e), one)
    assert entries.held[0] == decoded_module.DECODED_CACHE_ENTRIES


def test_an_entry_larger_than_the_bounds_is_still_served(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decoded_module, "DECODED_CACHE_MESSAGES", 10)
    entries = cache()
    for e in range(3):
        assert len(entries.messages(Position(1, e), entry(1000))) == 1000
    assert entries.held == (1, 1000, len(entry(1000)))  # only the newest, alone above the bound
