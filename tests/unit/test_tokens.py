"""Bearer tokens (pure): every kind of bad token is refused with its reason."""

from __future__ import annotations

import base64

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.security.tokens import (
    CLUSTER_ROLE,
    Algorithm,
    AuthFailed,
    Failure,
    TokenRules,
    bearer,
    cluster_token,
    mint,
    verify,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
SECRET = b"s" * 32
HS = TokenRules(Algorithm.HS256, SECRET, cluster_secret=b"c" * 32)


def failure(token: str, rules: TokenRules = HS, now: float = NOW) -> Failure:
    with pytest.raises(AuthFailed) as info:
        verify(token, rules, now)
    return info.value.failure


@pytest.fixture(scope="module")
def rsa_keys() -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def test_valid_token_names_role_and_expiry() -> None:
    identity = verify(mint("alice", Algorithm.HS256, SECRET, now_s=NOW, expires_in_s=60), HS, NOW + 59)
    assert identity.role == "alice" and identity.expires_s == NOW + 60 and not identity.internal
    assert verify(mint("bob", Algorithm.HS256, SECRET, now_s=NOW), HS, NOW + 10**9).expires_s is None


def test_expired_and_not_yet_valid() -> None:
    token = mint("alice", Algorithm.HS256, SECRET, now_s=NOW, expires_in_s=60)
    assert failure(token, now=NOW + 60) is Failure.EXPIRED
    early = jwt.encode({"sub": "alice", "nbf": NOW + 30}, SECRET, algorithm="HS256")
    assert failure(early) is Failure.NOT_YET_VALID
    assert verify(early, HS, NOW + 30).role == "alice"


def test_wrong_key_none_and_malformed() -> None:
    assert failure(jwt.encode({"sub": "a"}, b"x" * 32, algorithm="HS256")) is Failure.SIGNATURE
    assert failure(jwt.encode({"sub": "a"}, None, algorithm="none")) is Failure.ALGORITHM
    unsigned = jwt.encode({"sub": "a"}, SECRET, algorithm="HS256").rsplit(".", 1)[0] + "."
    assert failure(unsigned) is Failure.SIGNATURE
    good = mint("a", Algorithm.HS256, SECRET, now_s=NOW)
    assert failure(good[:-3]) in (Failure.SIGNATURE, Failure.MALFORMED)
    for garbage in ("garbage", "a.b.c", "", "..", base64.b64encode(b'{"alg":"HS256"}').decode() + ".e30."):
        assert failure(garbage) in (Failure.MALFORMED, Failure.MISSING, Failure.SIGNATURE)
    assert failure(jwt.encode({"other": "a"}, SECRET, algorithm="HS256")) is Failure.NO_ROLE
    assert failure(jwt.encode({"sub": "a", "exp": "soon"}, SECRET, algorithm="HS256")) is Failure.MALFORMED


def test_hs_rs_confusion_refused(rsa_keys: tuple[bytes, bytes]) -> None:
    private, public = rsa_keys
    rs = TokenRules(Algorithm.RS256, public)
    assert verify(mint("a", Algorithm.RS256, private, now_s=NOW), rs, NOW).role == "a"
    # HS256 "signed" with the public key: the classic confusion attack
    import hashlib
    import hmac

    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")
    payload = base64.urlsafe_b64encode(b'{"sub":"admin"}').rstrip(b"=")
    signature = base64.urlsafe_b64encode(hmac.new(public, header + b"." + payload, hashlib.sha256).digest())
    forged = (header + b"." + payload + b"." + signature.rstrip(b"=")).decode()
    assert failure(forged, rs) is Failure.ALGORITHM
    # and an RS256 token against an HS256 gateway
    assert failure(mint("a", Algorithm.RS256, private, now_s=NOW)) is Failure.ALGORITHM


def test_issuer_audience_and_role_claim() -> None:
    rules = TokenRules(Algorithm.HS256, SECRET, issuer="folio", audience="gw", role_claim="role")
    ok = jwt.encode({"role": "r", "iss": "folio", "aud": ["x", "gw"]}, SECRET, algorithm="HS256")
    assert verify(ok, rules, NOW).role == "r"
    assert failure(jwt.encode({"role": "r", "iss": "evil", "aud": "gw"}, SECRET), rules) is Failure.ISSUER
    assert failure(jwt.encode({"role": "r", "iss": "folio", "aud": "x"}, SECRET), rules) is Failure.AUDIENCE
    assert failure(jwt.encode({"sub": "r", "iss": "folio", "aud": "gw"}, SECRET), rules) is Failure.NO_ROLE


def test_cluster_tokens_only_with_the_cluster_secret() -> None:
    internal = verify(cluster_token(b"c" * 32, NOW), HS, NOW)
    assert internal.internal and internal.role == CLUSTER_ROLE
    assert failure(cluster_token(b"c" * 32, NOW), TokenRules(Algorithm.HS256, SECRET)) is Failure.SIGNATURE
    assert failure(cluster_token(SECRET, NOW)) is Failure.SIGNATURE  # user key cannot mint one
    assert failure(cluster_token(b"c" * 32, NOW), now=NOW + 61) is Failure.EXPIRED
    # a user token naming the internal role is no internal identity
    assert failure(mint(CLUSTER_ROLE, Algorithm.HS256, SECRET, now_s=NOW)) is Failure.NO_ROLE


def test_bearer_forms() -> None:
    assert bearer("Bearer abc", None) == "abc"
    assert bearer("bearer abc", "zzz") == "abc"  # the header wins
    assert bearer(None, "abc") == "abc"
    assert bearer(None, "Bearer abc") == "abc"
    assert bearer("Basic abc", None) is None
    assert bearer(None, None) is None
