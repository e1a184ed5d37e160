"""The storage nodes' peer authentication: a cluster secret and an HMAC proof (pure).

Owns: the proof a client writes as the first bytes of a connection to a node,
and its check (the proof's layout is storage/wire.py's). Rules
(docs/decisions/0009-security-model.md; the frames that follow are unchanged):
- proof = ``wire.PROOF_MAGIC`` (8 bytes) | nonce (16 random bytes) | unix time in
  ms (u64) | HMAC-SHA256(secret, magic | nonce | time) (32 bytes):
  ``wire.PROOF_BYTES`` in all;
- a node started with a cluster secret accepts a connection only after a proof
  that verifies, whose time is within ``WINDOW_MS`` of its own clock and whose
  nonce it has not seen within that window (a recorded proof cannot be replayed);
- a node without a secret expects no proof (the wire protocol is unchanged) and
  skips one a client sends (its first 8 bytes, the magic, read as a frame length
  would be beyond any frame), so a client given the secret works with both.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from storage.wire import PROOF_NONCE_BYTES, parse_proof, proof_signed

WINDOW_MS = 60_000
SEEN_MAX = 100_000


def proof(secret: bytes, now_ms: int, nonce: bytes | None = None) -> bytes:
    signed = proof_signed(nonce if nonce is not None else os.urandom(PROOF_NONCE_BYTES), now_ms)
    return signed + hmac.new(secret, signed, hashlib.sha256).digest()


class ProofChecker:
    """Checks proofs for one node; remembers the nonces of the last ``WINDOW_MS``."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._seen: dict[bytes, int] = {}  # nonce -> its time

    def check(self, data: bytes, now_ms: int) -> bool:
        parsed = parse_proof(data)
        if parsed is None:
            return False
        signed, nonce, sent_ms, mac = parsed
        if not hmac.compare_digest(mac, hmac.new(self._secret, signed, hashlib.sha256).digest()):
            return False
        if abs(now_ms - sent_ms) > WINDOW_MS:
            return False
        if nonce in self._seen:
            return False
        if len(self._seen) >= SEEN_MAX:
            self._seen = {n: t for n, t in self._seen.items() if abs(now_ms - t) <= WINDOW_MS}
            if len(self._seen) >= SEEN_MAX:
                return False  # a flood of valid proofs: refuse rather than forget
        self._seen[nonce] = sent_ms
        return True
