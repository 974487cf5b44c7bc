"""Chained records and signed checkpoints (``docs/trust.md``, ``firmware-notes/mqtt.md``).

Every record an agent captures carries ``prev``: the hash of that agent's previous record (its
``seq`` − 1), ``GENESIS`` for ``seq`` 1. A record's hash is the SHA-256 (lowercase hex) of its
canonical form (:func:`protocols.canonical.canonical`, RFC 8785 over the normalized record,
``prev`` included), so each record commits to the whole chain before it. The agent signs
*checkpoints* — (vehicle, agent, seq, hash) — with its Ed25519 key; one checkpoint covers every
record up to its seq through the chain. The collector signs its acknowledgements the same way.
Signed messages are the RFC 8785 bytes of a small object with a ``type`` that says what it is, so
a signature of one kind can never pass for another.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric import ed25519
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from protocols.canonical import canonical, jcs
from protocols.identity import key_id
from protocols.records import RecordError

#: ``prev`` of an agent's first record.
GENESIS: Final = "0" * 64
HASH_RE: Final = re.compile(r"^[0-9a-f]{64}\Z")
KEY_ID_RE: Final = re.compile(r"^[0-9a-f]{16}\Z")


def record_hash(rec: Mapping[str, Any]) -> str:
    """The chain hash of a record: SHA-256 of its canonical form (RecordError if it has none)."""
    return hashlib.sha256(canonical(rec)).hexdigest()


def try_hash(rec: Any) -> str | None:
    """:func:`record_hash` of anything, or None when it is not a record with a canonical form."""
    if not isinstance(rec, dict):
        return None
    try:
        return record_hash(rec)
    except (RecordError, TypeError, ValueError, KeyError, RecursionError):
        return None


def is_hash(value: Any) -> bool:
    """True for a chain hash (64 lowercase hex digits)."""
    return isinstance(value, str) and HASH_RE.match(value) is not None


@dataclass(frozen=True)
class Checkpoint:
    """An agent's signature over its chain at ``seq`` (whose record hashes to ``hash``)."""

    seq: int
    hash: str
    key: str  # key id of the signing key
    sig: str  # base64 Ed25519 signature of checkpoint_message(...)

    def json(self) -> dict[str, Any]:
        """The checkpoint as it travels in a batch."""
        return {"seq": self.seq, "hash": self.hash, "key": self.key, "sig": self.sig}


def checkpoint_message(vehicle: str, agent: str, seq: int, record: str) -> bytes:
    """The bytes an agent signs for a checkpoint."""
    return jcs({"type": "frota.checkpoint", "vehicle": vehicle, "agent": agent, "seq": seq,
                "hash": record})


def sign_checkpoint(
    key: ed25519.Ed25519PrivateKey, vehicle: str, agent: str, seq: int, record: str
) -> Checkpoint:
    """Sign the chain of (vehicle, agent) at ``seq``."""
    sig = key.sign(checkpoint_message(vehicle, agent, seq, record))
    return Checkpoint(seq, record, key_id(key.public_key()), base64.b64encode(sig).decode())


def parse_checkpoint(obj: Any) -> Checkpoint:
    """A checkpoint from a batch; ValueError says what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError("checkpoint is not an object")
    seq, record, kid, sig = obj.get("seq"), obj.get("hash"), obj.get("key"), obj.get("sig")
    if type(seq) is not int or not 1 <= seq <= (1 << 53) - 1:
        raise ValueError("checkpoint seq is not a positive integer")
    if not is_hash(record):
        raise ValueError("checkpoint hash is not 64 hex digits")
    if not isinstance(kid, str) or not KEY_ID_RE.match(kid):
        raise ValueError("checkpoint key is not a key id")
    if not isinstance(sig, str) or len(sig) > 200:
        raise ValueError("checkpoint sig is not a signature")
    return Checkpoint(seq, str(record), kid, sig)


def decode_sig(sig: str) -> bytes | None:
    """The raw bytes of a base64 signature, or None."""
    try:
        raw = base64.b64decode(sig, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 64 else None


def checkpoint_valid(
    key: ed25519.Ed25519PublicKey, vehicle: str, agent: str, cp: Checkpoint
) -> bool:
    """True when ``cp`` is ``key``'s signature over (vehicle, agent, seq, hash).

    Checked by libsodium (PyNaCl), as every Ed25519 signature is (:func:`protocols.identity.verify`): the
    collector verifies one checkpoint per batch, and there libsodium costs half the CPU
    (≈ 55 µs against ≈ 105 µs on the development machine) and releases the GIL while it
    works, where ``cryptography`` holds it (docs/trust.md, "What it costs"), so the live
    verifier's thread no longer stops the ingest's. The same signatures verify: libsodium
    accepts an RFC 8032 signature by the key, and refuses as ``cryptography`` does any other
    (a non-canonical S too), besides keys and R of small order, which no honest signer
    makes (tests/trust/test_chain.py checks the two agree)."""
    raw = decode_sig(cp.sig)
    if raw is None:
        return False
    message = checkpoint_message(vehicle, agent, cp.seq, cp.hash)
    try:
        _verify_key(key.public_bytes_raw()).verify(message, raw)
    except BadSignatureError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _verify_key(raw: bytes) -> VerifyKey:
    """libsodium's form of a public key (a fleet has few: kept)."""
    return VerifyKey(raw)


def ack_message(body: Mapping[str, Any]) -> bytes:
    """The bytes a collector signs for an acknowledgement: the ack without ``sig``."""
    return jcs({"type": "frota.ack", **{k: v for k, v in body.items() if k != "sig"}})
