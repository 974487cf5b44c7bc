"""The chain in the store on both backends (SQLite, PostgreSQL): links, checkpoints, conflicts,
the live verifier and frota verify's check, through the collector's ingest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.chaincheck import check_store
from collector.ingest import Ingest
from collector.store import Store, open_store
from collector.verifier import ChainVerifier
from protocols import identity
from protocols.chain import GENESIS, record_hash, sign_checkpoint
from protocols.keyring import entry_json, load_keyring, write_entries
from protocols.uplink import encode_batch
from tests.trust.fleet import A, speed

TOPIC = f"frota/v1/{A}/up"


@pytest.fixture
def chained_store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.close()


def _chain(agent: str, kmhs: list[float]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    prev = GENESIS
    for seq, kmh in enumerate(kmhs, 1):
        rec = {**speed(A, seq, kmh), "agent": agent, "seq": seq, "prev": prev}
        prev = record_hash(rec)
        out.append(rec)
    return out


def test_links_checkpoints_conflicts_and_verification(chained_store: Store, tmp_path: Path) -> None:
    store = chained_store
    ca_key, ca_cert = identity.make_ca("test CA")
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(ca_key, ca_cert, A, "vehicle", key.public_key())
    (tmp_path / "ca.crt").write_bytes(identity.cert_pem(ca_cert))
    write_entries(tmp_path / "keyring.json", [entry_json(cert)])
    keyring = load_keyring(tmp_path / "keyring.json", ca_cert)
    ingest = Ingest(store, lambda: frozenset({A}))
    genuine = _chain("a1", [10.0, 11.0, 12.0, 13.0])
    cp = sign_checkpoint(key, A, "a1", 4, record_hash(genuine[3])).json()
    # live records ahead of the backlog: 3-4 first, then 1-2, then 1-2 again (a resend)
    answer = ingest.handle(TOPIC, encode_batch(A, "a1", genuine[2:], checkpoint=cp))
    assert answer is not None
    assert answer[1].stored == [(3, 4)]
    assert answer[1].hashes[4] == record_hash(genuine[3])
    ingest.handle(TOPIC, encode_batch(A, "a1", genuine[:2]))
    ingest.handle(TOPIC, encode_batch(A, "a1", genuine[:2]))
    verifier = ChainVerifier(store, tmp_path / "ca.crt", tmp_path / "keyring.json")
    assert verifier.run_once() == 0
    assert store._read("SELECT state FROM checkpoints") == [("good",)]
    assert check_store(store, keyring).problems == []
    # another record under seq 2, and another for frame 3 under another agent: conflicts
    forged = _chain("a1", [10.0, 99.0])
    answer = ingest.handle(TOPIC, encode_batch(A, "a1", forged))
    assert answer is not None
    assert answer[1].stored == [(1, 1)]
    assert answer[1].conflicts == [2]
    other = _chain("b2", [10.0, 11.0, 98.0])
    ingest.handle(TOPIC, encode_batch(A, "b2", other))
    assert [tuple(r) for r in store._read(
        "SELECT agent, seq, cause FROM conflicts ORDER BY agent, seq")] == [
        ("a1", 2, "identity"), ("b2", 3, "frame")]
    # b2's frames 1 and 2 are the same content as a1's: duplicates, not stored again
    assert store.count() == 4
    verifier.run_once()
    causes = {(str(a), int(s), str(c)) for a, s, c in store._read(
        "SELECT agent, seq, cause FROM integrity")}
    assert ("a1", 2, "conflict") in causes
    assert ("b2", 3, "conflict") in causes
    found = {(p.agent, p.seq, p.cause) for p in check_store(store, keyring).problems}
    assert ("a1", 2, "conflict") in found
    assert ("b2", 1, "unsigned") in found


def test_the_verifier_walks_every_agent_of_every_vehicle(chained_store: Store,
                                                          tmp_path: Path) -> None:
    # Links as the ingest writes them for three agents of two vehicles (the verifier finds the
    # agents by seeking the links' key, not by reading every link); one chain broken at seq 3.
    store = chained_store
    _, ca_cert = identity.make_ca("test CA")
    (tmp_path / "ca.crt").write_bytes(identity.cert_pem(ca_cert))
    write_entries(tmp_path / "keyring.json", [])

    def digest(vehicle: str, agent: str, seq: int) -> str:
        return f"{vehicle}{agent}{seq}".encode().hex().ljust(64, "0")[:64]

    tops = {("ABC1D23", "a1"): 3, ("ABC1D23", "a2"): 2, ("XYZ9K88", "a1"): 4}
    links = []
    for (vehicle, agent), top in tops.items():
        for seq in range(1, top + 1):
            prev = GENESIS if seq == 1 else digest(vehicle, agent, seq - 1)
            if (vehicle, seq) == ("XYZ9K88", 3):
                prev = "f" * 64
            links.append((vehicle, agent, seq, digest(vehicle, agent, seq), prev, "stored", 0))
    store.apply([("INSERT INTO links (vehicle, agent, seq, hash, prev, state, received_ms) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?)", links)])
    verifier = ChainVerifier(store, tmp_path / "ca.crt", tmp_path / "keyring.json")
    assert verifier.run_once() == 1
    assert sorted((str(v), str(a), int(s)) for v, a, s in store._read(
        "SELECT vehicle, agent, seq FROM chain_state")) == [
        ("ABC1D23", "a1", 3), ("ABC1D23", "a2", 2), ("XYZ9K88", "a1", 4)]
    assert [tuple(r) for r in store._read("SELECT vehicle, agent, seq, cause FROM integrity")] == [
        ("XYZ9K88", "a1", 3, "chain_break")]
