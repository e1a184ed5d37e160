"""Server-side search and paging of the admin list routes (pure).

Owns: ``page`` (filter by a case-insensitive substring, then slice) and
``PageParams``, the optional Folio query parameters ``search``, ``offset`` and
``limit`` (their FastAPI dependency with the documented bounds is
``route_docs.Paging``). Rule: the answer stays Pulsar's plain JSON array, so Pulsar clients are
unchanged; the number of matches before slicing goes in the ``X-Total-Count``
header (``TOTAL_HEADER``). ``offset`` >= 0, ``limit`` 0..``LIMIT_MAX``,
``search`` at most ``SEARCH_MAX`` characters; FastAPI answers a bad value 400
(and ``page`` raises ``InvalidArgument``, 400, when called directly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.meta.errors import InvalidArgument

LIMIT_MAX = 1000
OFFSET_MAX = 2**63 - 1
SEARCH_MAX = 512
TOTAL_HEADER = "X-Total-Count"


def page(
    items: Sequence[str], search: str | None = None, offset: int = 0, limit: int | None = None
) -> tuple[list[str], int]:
    """``items`` containing ``search`` (case-insensitive), from ``offset``, at most
    ``limit`` of them; and how many matched in all."""
    if offset < 0:
        raise InvalidArgument(f"offset must be >= 0, got {offset}")
    if limit is not None and not 0 <= limit <= LIMIT_MAX:
        raise InvalidArgument(f"limit must be from 0 to {LIMIT_MAX}, got {limit}")
    if search:
        needle = search.casefold()
        matched = [item for item in items if needle in item.casefold()]
    else:
        matched = list(items)
    end = None if limit is None else offset + limit
    return matched[offset:end], len(matched)


@dataclass(frozen=True, slots=True)
class PageParams:
    """Optional ``?search=&offset=&limit=`` of a list route (see ``Paging``)."""

    search: str | None = None
    offset: int = 0
    limit: int | None = None

    def apply(self, items: Sequence[str]) -> tuple[list[str], int]:
        return page(items, self.search, self.offset, self.limit)
