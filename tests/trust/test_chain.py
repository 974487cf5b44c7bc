"""The chain's worked vectors (firmware-notes/mqtt.md) and the checkpoint signature."""

from __future__ import annotations

from pathlib import Path

from protocols import identity
from protocols.canonical import canonical
from protocols.chain import GENESIS, checkpoint_valid, is_hash, record_hash, sign_checkpoint
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
