"""The chain's worked vectors (firmware-notes/mqtt.md) and the checkpoint signature."""

from __future__ import annotations

from pathlib import Path

from protocols import identity
from protocols.canonical import canonical
from protocols.chain import GENESIS, checkpoint_valid, record_hash, sign_checkpoint
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
