"""A namespace's bundles as a policy value, with its Pulsar JSON form (pure).

Owns: ``Bundles`` (the ``bundles`` field of the namespace policies: the hash
boundaries of its bundles) and the boundary text form ``"0x40000000"``.
Rule (docs/compatibility.md §5.1): ``n`` bundles split the 32-bit hash space
evenly (``gateway.ownership.bundles.boundaries``) unless the stored boundaries
say otherwise; boundaries start at 0x00000000, end at 0xffffffff and strictly
increase, at most ``BUNDLES_MAX`` bundles; anything else is an ``InvalidPolicy``
naming the field.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from gateway.meta.errors import InvalidPolicy
from gateway.meta.policy_fields import int_field, json_object, kind_of
from gateway.ownership.bundles import DEFAULT_NUM_BUNDLES as BUNDLES_DEFAULT
from gateway.ownership.bundles import HASH_MAX, boundaries
from gateway.ownership.bundles import MAX_NUM_BUNDLES as BUNDLES_MAX


def format_boundary(value: int) -> str:
    return f"0x{value:08x}"


def parse_boundary(text: Any) -> int:
    if not isinstance(text, str) or not text.lower().startswith("0x"):
        raise InvalidPolicy(f'bundle boundary must be a string like "0x40000000", got {kind_of(text)}')
    try:
        value = int(text, 16)
    except ValueError:
        raise InvalidPolicy(f"bundle boundary {text[:20]!r} is not hexadecimal") from None
    if not 0 <= value <= HASH_MAX:
        raise InvalidPolicy(f"bundle boundary {text[:20]!r} is outside 0x00000000..0xffffffff")
    return value


@dataclass(frozen=True, slots=True)
class Bundles:
    """Hash ranges of a namespace: ``[b0, b1), [b1, b2), …, [bn-1, 0xffffffff]``."""

    boundaries: tuple[int, ...] = tuple(boundaries(BUNDLES_DEFAULT))

    @classmethod
    def of(cls, count: int) -> Bundles:
        return cls(tuple(boundaries(int_field(count, "bundles.numBundles", 1, BUNDLES_MAX))))

    @property
    def count(self) -> int:
        return len(self.boundaries) - 1

    def ranges(self) -> list[str]:
        """Bundle names ``0x%08x_0x%08x`` in hash order."""
        b = self.boundaries
        return [f"{format_boundary(lo)}_{format_boundary(hi)}" for lo, hi in itertools.pairwise(b)]

    def to_json(self) -> dict[str, Any]:
        return {"boundaries": [format_boundary(b) for b in self.boundaries], "numBundles": self.count}

    @classmethod
    def from_json(cls, value: Any) -> Bundles:
        obj = json_object(value, "bundles")
        count = obj.get("numBundles")
        raw = obj.get("boundaries")
        if raw is None:
            return cls.of(BUNDLES_DEFAULT if count is None else count)
        if not isinstance(raw, list):
            raise InvalidPolicy(f"bundles.boundaries must be a list, got {kind_of(raw)}")
        boundaries = tuple(parse_boundary(b) for b in raw)
        if not 2 <= len(boundaries) <= BUNDLES_MAX + 1:
            raise InvalidPolicy(f"bundles.boundaries must have 2 to {BUNDLES_MAX + 1} entries")
        if boundaries[0] != 0 or boundaries[-1] != HASH_MAX:
            raise InvalidPolicy("bundles.boundaries must start at 0x00000000 and end at 0xffffffff")
        if any(a >= b for a, b in itertools.pairwise(boundaries)):
            raise InvalidPolicy("bundles.boundaries must be strictly increasing")
        if (
            count is not None
            and int_field(count, "bundles.numBundles", 1, BUNDLES_MAX) != len(boundaries) - 1
        ):
            raise InvalidPolicy(
                f"bundles.numBundles is {count} but {len(boundaries)} boundaries make {len(boundaries) - 1}"
            )
        return cls(boundaries)
