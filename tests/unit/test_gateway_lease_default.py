"""The gateway's default lease: short enough for fast takeover, sound for its keepalive."""

from __future__ import annotations

import pytest

from coordination.lease import KeepalivePolicy
from gateway.main import DEFAULT_LEASE_TTL_S

pytestmark = pytest.mark.unit


def test_the_gateways_default_lease_tolerates_a_stalled_renewal_of_over_a_second() -> None:
    policy = KeepalivePolicy.for_ttl(DEFAULT_LEASE_TTL_S)
    assert DEFAULT_LEASE_TTL_S <= 3  # a dead gateway's topics move within ~5 s
    assert (policy.interval_ms, policy.retry_ms, policy.margin_ms) == (1000, 300, 300)
    # renewed every second; a renewal may fail or hang this long before the lease is given up
    assert policy.ttl_ms - policy.margin_ms - policy.interval_ms >= 1_500
    # ... and given up locally before etcd (counting from its own receipt) could expire it
    assert policy.margin_ms > 0
