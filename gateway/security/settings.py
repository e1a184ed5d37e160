"""``folio gateway`` security flags and the ``SecurityConfig`` they make.

Owns: the command-line surface of authentication and browser safety, and the
rule that security is on in any deployment: a gateway with no token key runs
open only when it listens on loopback (``folio up``), says so at start, and
refuses to start on any other address unless ``--insecure-open`` is given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway.security.guard import LOOPBACK_HOSTS, SecurityConfig
from gateway.security.tokens import Algorithm, TokenRules


class SettingsError(Exception):
    """The flags do not make a safe configuration (the gateway does not start)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security")
    group.add_argument(
        "--token-secret-key", default=None, help="HS256 secret file (folio token create-secret-key)"
    )
    group.add_argument(
        "--token-public-key", default=None, help="RS256 public key file, PEM (create-key-pair)"
    )
    group.add_argument("--token-issuer", default=None, help="required iss claim")
    group.add_argument("--token-audience", default=None, help="required aud claim")
    group.add_argument("--token-role-claim", default="sub", help="claim that names the role (default sub)")
    group.add_argument("--superuser-roles", default="", help="comma-separated roles allowed everything")
    group.add_argument(
        "--cluster-secret",
        default=None,
        help="file shared by the cluster's gateways (they authenticate each other)",
    )
    group.add_argument(
        "--allowed-origins",
        default="",
        help="comma-separated browser origins allowed cross-origin (CORS, WebSocket)",
    )
    group.add_argument(
        "--allowed-hosts", default="", help="extra Host names this gateway answers to ('*': any)"
    )
    group.add_argument(
        "--auth-failures-max", type=int, default=20, help="per client address and window; 429 beyond"
    )
    group.add_argument("--auth-failure-window", type=float, default=60.0, help="seconds")
    group.add_argument(
        "--sessions-per-role",
        type=int,
        default=1_000,
        help="open WebSockets and event streams of a role; 429 beyond",
    )
    group.add_argument(
        "--insecure-open", action="store_true", help="allow running without authentication off loopback"
    )


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror}") from exc


def config_from(args: argparse.Namespace, advertise_host: str) -> SecurityConfig:
    if args.token_secret_key and args.token_public_key:
        raise SettingsError("give --token-secret-key or --token-public-key, not both")
    rules: TokenRules | None = None
    cluster_secret = _read(args.cluster_secret) if args.cluster_secret else None
    if args.token_secret_key or args.token_public_key:
        algorithm = Algorithm.HS256 if args.token_secret_key else Algorithm.RS256
        rules = TokenRules(
            algorithm=algorithm,
            verify_key=_read(args.token_secret_key or args.token_public_key),
            issuer=args.token_issuer,
            audience=args.token_audience,
            role_claim=args.token_role_claim,
            cluster_secret=cluster_secret,
        )
    elif args.host not in LOOPBACK_HOSTS and not args.insecure_open:
        raise SettingsError(
            f"no token key given and {args.host} is not loopback: give --token-secret-key or"
            " --token-public-key (or --insecure-open to run without authentication)"
        )
    hosts = _split(args.allowed_hosts)
    names = ("*",) if "*" in hosts else tuple({*LOOPBACK_HOSTS, advertise_host.lower(), args.host, *hosts})
    return SecurityConfig(
        tokens=rules,
        superusers=frozenset(_split(args.superuser_roles)),
        allowed_origins=_split(args.allowed_origins),
        allowed_hosts=names,
        cluster_secret=cluster_secret,
        auth_failures_max=max(1, args.auth_failures_max),
        auth_failure_window_s=args.auth_failure_window,
        sessions_per_role=max(1, args.sessions_per_role),
    )


def banner(config: SecurityConfig, host: str) -> str:
    if config.open:
        return (
            f"SECURITY OFF: no authentication or authorization on {host} (open mode: anyone who can"
            " reach this address may do anything; start with --token-secret-key or --token-public-key)"
        )
    assert config.tokens is not None
    return (
        f"security on: {config.tokens.algorithm} bearer tokens, role claim {config.tokens.role_claim!r},"
        f" {len(config.superusers)} superuser role(s)"
    )
