"""The chain's worked vectors (firmware-notes/mqtt.md) and the checkpoint signature."""

from __future__ import annotations

import base64
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ed25519

from protocols import identity
from protocols.canonical import canonical
from protocols.chain import (
    GENESIS,
    Checkpoint,
    checkpoint_message,
    checkpoint_valid,
    is_hash,
    record_hash,
    sign_checkpoint,
)
from tests.services import PROJECT

RECORD = {"vehicle": "ABC1D23", "ts": "2026-03-02T14:00:01.000Z", "kind": "speed", "agent": "a1",
          "seq": 1, "prev": GENESIS, "kmh": 61.5}


def _note() -> str:
    return (PROJECT / "firmware-notes" / "mqtt.md").read_text()


def test_the_worked_record_hash_of_the_firmware_note() -> None:
    note = _note()
    line = note.split("has the canonical form (keys sorted, no spaces)\n\n```\n", 1)[1].split("\n")[0]
    assert canonical(RECORD) == line.encode()
    # sha256sum of that line, run by hand (firmware-notes/mqtt.md)
    digest = "bf46c4c7b526ee284438095c8729b0814e68f90b6e16a9a116ff1337875dd5f9"
    assert digest in note
    assert record_hash(RECORD) == digest


def test_a_checkpoint_verifies_only_for_what_was_signed(tmp_path: Path) -> None:
    key = identity.new_signing_key()
    cp = sign_checkpoint(key, "ABC1D23", "a1", 7, "ab" * 32)
    assert checkpoint_valid(key.public_key(), "ABC1D23", "a1", cp)
    assert not checkpoint_valid(key.public_key(), "XYZ9K88", "a1", cp)
    assert not checkpoint_valid(key.public_key(), "ABC1D23", "a2", cp)
    assert not checkpoint_valid(identity.new_signing_key().public_key(), "ABC1D23", "a1", cp)
    moved = type(cp)(8, cp.hash, cp.key, cp.sig)
    assert not checkpoint_valid(key.public_key(), "ABC1D23", "a1", moved)


#: The order of the Ed25519 group (RFC 8032, 5.1): a signature's S must be below it.
L = 2**252 + 27742317777372353535851937790883648493


def test_libsodium_verifies_checkpoints_as_cryptography_does() -> None:
    # checkpoint_valid verifies with libsodium (PyNaCl), identity.verify with cryptography
    # (OpenSSL): the same verdicts on a good signature and on altered ones
    key = identity.new_signing_key()
    cp = sign_checkpoint(key, "ABC1D23", "a1", 7, "ab" * 32)
    message = checkpoint_message("ABC1D23", "a1", 7, "ab" * 32)
    raw = base64.b64decode(cp.sig)
    s = int.from_bytes(raw[32:], "little")
    cases = {
        "as signed": (raw, True),
        "S + L (the same S modulo L, not canonical: RFC 8032 5.1.7 refuses it)":
            (raw[:32] + (s + L).to_bytes(32, "little"), False),
        "R altered": (bytes([raw[0] ^ 1]) + raw[1:], False),
        "S altered": (raw[:40] + bytes([raw[40] ^ 1]) + raw[41:], False),
    }
    for what, (sig, expected) in cases.items():
        altered = Checkpoint(7, cp.hash, cp.key, base64.b64encode(sig).decode())
        assert checkpoint_valid(key.public_key(), "ABC1D23", "a1", altered) is expected, what
        assert identity.verify(key.public_key(), sig, message) is expected, what


def test_a_key_of_small_order_verifies_nothing() -> None:
    # the neutral point as a public key, and R the neutral point with S = 0: [S]B = R + [k]A
    # holds for every message, so a verifier that does not refuse such keys accepts it (OpenSSL,
    # through cryptography, does; libsodium refuses it). Every signature Frota checks goes
    # through libsodium: checkpoints, and identity.verify (acks, bundles, inspector tokens).
    neutral = (1).to_bytes(32, "little")
    key = ed25519.Ed25519PublicKey.from_public_bytes(neutral)
    forged = Checkpoint(7, "ab" * 32, "0" * 16, base64.b64encode(neutral + bytes(32)).decode())
    assert not checkpoint_valid(key, "ABC1D23", "a1", forged)
    assert not identity.verify(key, neutral + bytes(32), b"any message at all")


def test_a_signature_of_the_wrong_size_or_type_is_no_signature() -> None:
    key = identity.new_signing_key()
    sig = key.sign(b"m")
    assert identity.verify(key.public_key(), sig, b"m")
    assert not identity.verify(key.public_key(), sig[:63], b"m")
    assert not identity.verify(key.public_key(), sig + b"\0", b"m")
    assert not identity.verify(key.public_key(), b"", b"m")


def test_the_agents_buffer_chains_every_record_it_captures(tmp_path: Path) -> None:
    import json

    from agent.buffer import Buffer
    from tests.agent.helpers import speed

    buf = Buffer(tmp_path / "buffer.sqlite")
    assert buf.add([("reg", speed(n, device_seq=n)) for n in (1, 2)]) == [1, 2]
    assert buf.add([("reg", speed(1, device_seq=1)), ("reg", speed(3, device_seq=3))]) == [3]
    bodies = {seq: json.loads(body) for seq, body in buf.pending(0, 10)}
    assert bodies[1]["prev"] == GENESIS
    assert bodies[2]["prev"] == record_hash(bodies[1])
    assert bodies[3]["prev"] == record_hash(bodies[2])  # the skipped frame took no place
    hashes = buf.hashes([1, 2, 3])
    assert hashes == {seq: record_hash(body) for seq, body in bodies.items()}
    # a record captured before chaining has no stored hash: it is hashed from its JSON
    buf.conn.execute("UPDATE records SET hash = NULL WHERE seq = 2")
    assert buf.hashes([2]) == {2: hashes[2]}
    buf.close()
    reopened = Buffer(tmp_path / "buffer.sqlite")  # the chain goes on after a restart
    reopened.add([("reg", speed(4, device_seq=4))])
    assert json.loads(reopened.pending(3, 1)[0][1])["prev"] == hashes[3]
    reopened.close()


def test_a_hash_is_exactly_64_lowercase_hex_digits() -> None:
    assert is_hash("0" * 64)
    for wrong in ("0" * 64 + "\n", "0" * 63, "0" * 65, "A" * 64, " " + "0" * 63, 0):
        assert not is_hash(wrong), repr(wrong)
