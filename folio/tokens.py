"""``folio token``: keys and tokens for Folio's bearer authentication.

Owns: the token commands (names as Pulsar's ``pulsar tokens``):
``create-secret-key`` (HS256, 32 random bytes), ``create-key-pair`` (RS256,
2048-bit), ``create --role R [--expires 1h]`` signed with either key, and
``show`` (the claims of a token, unverified). Key files are written 0600.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.security.tokens import Algorithm, mint

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def duration_s(text: str) -> int:
    """``90``, ``30s``, ``15m``, ``12h``, ``7d``, ``2w``, ``1y`` in seconds."""
    m = re.fullmatch(r"(\d+)([smhdwy]?)", text.strip())
    if m is None or int(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 15m, 12h, 7d, 1y)")
    return int(m.group(1)) * _UNITS[m.group(2) or "s"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    token = sub.add_parser("token", help="authentication keys and tokens")
    cmds = token.add_subparsers(dest="token_command", required=True)
    secret = cmds.add_parser("create-secret-key", help="a new HS256 secret key file")
    secret.add_argument("--output", required=True)
    pair = cmds.add_parser("create-key-pair", help="a new RS256 key pair (PEM files)")
    pair.add_argument("--output-private-key", required=True)
    pair.add_argument("--output-public-key", required=True)
    create = cmds.add_parser("create", help="a token for a role")
    create.add_argument("--role", "--subject", dest="role", required=True)
    create.add_argument("--expires", "--expiry-time", dest="expires", type=duration_s, default=None)
    key = create.add_mutually_exclusive_group(required=True)
    key.add_argument("--secret-key", help="HS256 secret key file")
    key.add_argument("--private-key", help="RS256 private key file (PEM)")
    create.add_argument("--issuer", default=None)
    create.add_argument("--audience", default=None)
    create.add_argument("--role-claim", default="sub")
    show = cmds.add_parser("show", help="print a token's header and claims (not verified)")
    show.add_argument("token")


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def run(args: argparse.Namespace) -> int:
    if args.token_command == "create-secret-key":
        _write_private(args.output, secrets.token_bytes(32))
        return 0
    if args.token_command == "create-key-pair":
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_private(
            args.output_private_key,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        Path(args.output_public_key).write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return 0
    if args.token_command == "create":
        algorithm = Algorithm.HS256 if args.secret_key else Algorithm.RS256
        signing_key = Path(args.secret_key or args.private_key).read_bytes()
        print(
            mint(
                args.role,
                algorithm,
                signing_key,
                now_s=time.time(),
                expires_in_s=args.expires,
                issuer=args.issuer,
                audience=args.audience,
                role_claim=args.role_claim,
            )
        )
        return 0
    try:
        header = jwt.get_unverified_header(args.token)
        claims = jwt.decode(args.token, options={"verify_signature": False})
    except jwt.InvalidTokenError as exc:
        print(f"not a token: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"header": header, "claims": claims}, indent=2))
    return 0
