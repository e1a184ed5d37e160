"""Webhook targets (``gateway.security.egress``): the rule each forbidden address breaks,
and the send-time check of the HTTP client's backend.

The cluster's own ports are refused in every mode, on any loopback address when the
member listens on loopback; link-local (cloud metadata) addresses always, even
allow-listed; loopback is allowed in open mode only; numeric host forms such as
``2130706433`` are judged by the address they resolve to, at send time as at the
request; a name resolving to a forbidden address is refused when the connection is
opened (DNS rebinding), the text starting with REFUSED.
"""

from __future__ import annotations

import httpcore
import pytest

from gateway.protocol.errors import BadRequest
from gateway.security.egress import REFUSED, Egress, GuardedBackend, outcome, refusal

pytestmark = pytest.mark.unit

MEMBERS = {("127.0.0.1", 2379), ("127.0.0.1", 3181), ("127.0.0.1", 8001), ("127.0.0.1", 8080)}


def rule(ip: str, port: int, *, listed: bool = False, loopback_ok: bool = True) -> str | None:
    return refusal(ip, port, MEMBERS, listed=listed, loopback_ok=loopback_ok)


def test_cluster_ports_are_refused_in_every_mode() -> None:
    for ip in ("127.0.0.1", "127.0.0.2", "::1", "0.0.0.0", "::ffff:127.0.0.1"):
        for port in (2379, 3181, 8001, 8080):
            for loopback_ok in (True, False):
                text = rule(ip, port, listed=True, loopback_ok=loopback_ok)
                assert text is not None and "a port of this cluster" in text, (ip, port)


def test_link_local_is_refused_even_allow_listed() -> None:
    for ip in ("169.254.169.254", "fe80::1", "::ffff:169.254.169.254"):
        text = rule(ip, 80, listed=True)
        assert text is not None and "link-local" in text and "169.254.169.254" in text


def test_loopback_only_in_open_mode() -> None:
    assert rule("127.0.0.1", 9000, loopback_ok=True) is None
    assert rule("::1", 9000, loopback_ok=True) is None
    text = rule("127.0.0.1", 9000, loopback_ok=False)
    assert text is not None and "loopback" in text and "--webhook-hosts" in text
    assert rule("127.0.0.1", 9000, loopback_ok=False, listed=True) is None
    # private and unspecified addresses stay refused in open mode unless listed
    for ip in ("10.0.0.1", "192.168.1.2", "0.0.0.0"):
        text = rule(ip, 9000, loopback_ok=True)
        assert text is not None and "not a public address" in text, ip
    assert rule("93.184.216.34", 80, loopback_ok=False) is None


async def members() -> list[str]:
    return ["127.0.0.1:2379", "localhost:8080"]


async def test_numeric_and_named_hosts_resolve_before_the_check() -> None:
    egress = Egress((), members, loopback_ok=True)
    for host in ("2130706433", "0x7f000001", "127.1", "localhost"):
        _, text = await egress.check(host, 8080)
        assert text is not None and "a port of this cluster" in text, host
        _, text = await egress.check(host, 9000)
        assert text is None, host  # a developer's own endpoint, open mode
    _, text = await egress.check("2852039166", 80)  # 169.254.169.254 as one number
    assert text is not None and "link-local" in text


async def test_send_time_check_refuses_before_connecting() -> None:
    backend = GuardedBackend(Egress((), members, loopback_ok=False))
    for host, port in (("localhost", 9000), ("2130706433", 2379), ("169.254.169.254", 80)):
        with pytest.raises(httpcore.ConnectError) as refused:
            await backend.connect_tcp(host, port, timeout=1)
        assert str(refused.value).startswith(REFUSED) and outcome(refused.value) == "refused"


async def test_check_url_names_the_rule_as_a_bad_request() -> None:
    from gateway.api.webhooks import Webhooks

    class NoStore:  # check_url never touches the store
        pass

    async def never(*args: object) -> bool:
        raise AssertionError("not called")

    hooks = Webhooks(NoStore(), never, never, members, loopback_ok=True)  # type: ignore[arg-type]
    try:
        await hooks.check_url("http://127.0.0.1:9000/hook")  # allowed
        await hooks.check_url("http://no-such-host.invalid/hook")  # left to the send-time check
        for url in ("http://2130706433:2379/v3/kv/range", "http://169.254.169.254/latest/meta-data"):
            with pytest.raises(BadRequest) as bad:
                await hooks.check_url(url)
            assert str(bad.value).startswith("url: ")
        long_label = "http://" + "0." * 100 + "x" * 70 + "/hook"  # no resolver takes a 70-char label
        with pytest.raises(BadRequest, match="is not a valid host name"):
            await hooks.check_url(long_label)
        with pytest.raises(OSError, match="is not a valid host name"):  # at send time: a failed connect
            await hooks.egress.check("x" * 70 + ".example", 80)
    finally:
        await hooks.close()


def test_gateway_help_says_what_webhooks_may_never_reach(capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.main import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: any)" not in text
    for words in (
        "loopback in open mode",
        "the cluster's own ports (etcd's client and peer ports, storage nodes' wire and metrics,"
        " gateways, this gateway's --metrics-address)",
        "link-local addresses such as 169.254.169.254",
        "when a webhook is set (400) and at every connection",
    ):
        assert words in text, words
