"""Bearer tokens: verifying and minting the JWTs that carry a caller's role (pure).

Owns: ``TokenRules`` (which key and algorithm, optional issuer and audience,
the claim that names the role), ``verify`` and ``mint``. Rules
(docs/decisions/0009-security-model.md):
- exactly one algorithm is accepted, the configured one (HS256 with a secret
  or RS256 with a public key): ``alg: none`` and algorithm confusion (an HS256
  token signed with the RS256 public key) are refused by construction;
- ``exp`` and ``nbf`` are checked against the ``now_s`` the caller passes (the
  gateway's clock), never the library's; ``iss`` and ``aud`` when configured;
- a cluster token (header ``kid`` = ``CLUSTER_KID``) is verified only with the
  cluster secret (HS256): it is how gateways authenticate each other, and it
  names the internal role ``CLUSTER_ROLE``;
- every refusal is an ``AuthFailed`` with a closed ``Failure`` reason; the
  token itself never appears in a message.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import jwt

CLUSTER_KID = "folio-cluster"
CLUSTER_ROLE = "folio:gateway"  # never a user's role: a user token naming it is refused
CLUSTER_TOKEN_S = 60


class Algorithm(enum.StrEnum):
    HS256 = "HS256"
    RS256 = "RS256"


class Failure(enum.StrEnum):
    MISSING = "no token"
    MALFORMED = "malformed token"
    ALGORITHM = "algorithm not accepted"
    SIGNATURE = "bad signature"
    EXPIRED = "token expired"
    NOT_YET_VALID = "token not yet valid"
    ISSUER = "wrong issuer"
    AUDIENCE = "wrong audience"
    NO_ROLE = "token names no role"
    NO_SCHEME = "the Authorization header must read 'Bearer <token>': add 'Bearer ' before the token"
    QUERY_TOKEN = (
        "?token= is accepted only by WebSocket and event-stream routes (browsers cannot set"
        " their headers); send the token as 'Authorization: Bearer <token>'"
    )


class AuthFailed(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.value)
        self.failure = failure


@dataclass(frozen=True, slots=True)
class TokenRules:
    algorithm: Algorithm
    verify_key: bytes  # HS256: the secret; RS256: the public key (PEM)
    issuer: str | None = None
    audience: str | None = None
    role_claim: str = "sub"
    cluster_secret: bytes | None = None  # gateways' shared secret (cluster tokens)


@dataclass(frozen=True, slots=True)
class Identity:
    role: str
    expires_s: float | None  # the token's exp (None: no expiry)

    @property
    def internal(self) -> bool:
        return self.role == CLUSTER_ROLE


def _numeric(claims: dict[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AuthFailed(Failure.MALFORMED)
    return float(value)


def _decode(token: str, key: bytes, algorithm: Algorithm, rules: TokenRules | None) -> dict[str, Any]:
    options = {"verify_exp": False, "verify_nbf": False, "verify_iat": False, "verify_aud": False}
    options["verify_iss"] = False
    try:
        claims: dict[str, Any] = jwt.decode(token, key, algorithms=[algorithm.value], options=options)  # type: ignore[arg-type]
    except jwt.InvalidAlgorithmError as exc:
        raise AuthFailed(Failure.ALGORITHM) from exc
    except jwt.InvalidSignatureError as exc:
        raise AuthFailed(Failure.SIGNATURE) from exc
    except (jwt.InvalidTokenError, ValueError, TypeError) as exc:
        raise AuthFailed(Failure.MALFORMED) from exc
    if rules is not None:
        if rules.issuer is not None and claims.get("iss") != rules.issuer:
            raise AuthFailed(Failure.ISSUER)
        if rules.audience is not None:
            aud = claims.get("aud")
            audiences = aud if isinstance(aud, list) else [aud]
            if rules.audience not in audiences:
                raise AuthFailed(Failure.AUDIENCE)
    return claims


def verify(token: str, rules: TokenRules, now_s: float) -> Identity:
    """The identity a token proves at ``now_s``, or ``AuthFailed``."""
    if not token:
        raise AuthFailed(Failure.MISSING)
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:
        raise AuthFailed(Failure.MALFORMED) from exc
    if header.get("alg") not in (Algorithm.HS256, Algorithm.RS256):
        raise AuthFailed(Failure.ALGORITHM)
    if header.get("kid") == CLUSTER_KID:
        if rules.cluster_secret is None:
            raise AuthFailed(Failure.SIGNATURE)
        claims = _decode(token, rules.cluster_secret, Algorithm.HS256, None)
        role = CLUSTER_ROLE if claims.get("sub") == CLUSTER_ROLE else ""
    else:
        claims = _decode(token, rules.verify_key, rules.algorithm, rules)
        value = claims.get(rules.role_claim)
        role = value if isinstance(value, str) and value != CLUSTER_ROLE else ""
    if not role:
        raise AuthFailed(Failure.NO_ROLE)
    exp = _numeric(claims, "exp")
    nbf = _numeric(claims, "nbf")
    if exp is not None and now_s >= exp:
        raise AuthFailed(Failure.EXPIRED)
    if nbf is not None and now_s < nbf:
        raise AuthFailed(Failure.NOT_YET_VALID)
    return Identity(role, exp)


def mint(
    role: str,
    algorithm: Algorithm,
    signing_key: bytes,
    *,
    now_s: float,
    expires_in_s: float | None = None,
    issuer: str | None = None,
    audience: str | None = None,
    role_claim: str = "sub",
) -> str:
    """A token naming ``role`` (``folio token create``)."""
    claims: dict[str, Any] = {role_claim: role, "iat": int(now_s)}
    if expires_in_s is not None:
        claims["exp"] = int(now_s + expires_in_s)
    if issuer is not None:
        claims["iss"] = issuer
    if audience is not None:
        claims["aud"] = audience
    return jwt.encode(claims, signing_key, algorithm=algorithm.value)


def cluster_token(cluster_secret: bytes, now_s: float) -> str:
    """A short-lived token one gateway shows another (forwarded fan-out calls)."""
    claims = {"sub": CLUSTER_ROLE, "iat": int(now_s), "exp": int(now_s + CLUSTER_TOKEN_S)}
    return jwt.encode(claims, cluster_secret, algorithm="HS256", headers={"kid": CLUSTER_KID})


def bearer(authorization: str | None, query_token: str | None, *, query_allowed: bool = True) -> str | None:
    """The token of a request (pure): ``Authorization: Bearer …`` first, else ``?token=``,
    which may itself start with ``Bearer `` and is taken only where ``query_allowed``
    (browsers' WebSockets and event streams: a token in a REST URL ends up in proxy logs
    and browser history). ``AuthFailed`` for a header holding a bare token (NO_SCHEME)
    and for ``?token=`` elsewhere (QUERY_TOKEN); None when there is no token."""
    if authorization:
        scheme, _, rest = authorization.strip().partition(" ")
        if rest and scheme.lower() == "bearer":
            return rest.strip()
        if not rest:  # a bare token: its scheme left out
            raise AuthFailed(Failure.NO_SCHEME)
        return None
    if not query_token:
        return None
    if not query_allowed:
        raise AuthFailed(Failure.QUERY_TOKEN)
    scheme, _, rest = query_token.partition(" ")
    return rest.strip() if rest and scheme.lower() == "bearer" else query_token.strip()
