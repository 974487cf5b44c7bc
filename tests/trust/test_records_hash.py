"""A stored record's chain hash in its own row (migration 019_records_hash, docs/trust.md): a
store of the old layout (a ``links`` row for every stored record) migrates and still verifies,
and with the new layout ``frota verify`` and the live verifier still find a record edited,
deleted, inserted or reordered in the store — on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.chaincheck import check_store
from collector.ingest import Ingest
from collector.store import Store, open_store
from collector.verifier import ChainVerifier
from protocols import identity
from protocols.chain import GENESIS, record_hash, sign_checkpoint
from protocols.keyring import Keyring, entry_json, load_keyring, write_entries
from protocols.uplink import encode_batch
from tests.trust.fleet import A, speed

TOPIC = f"frota/v1/{A}/up"


def _records(agent: str, count: int, frame: int = 1,
             broken: int | None = None) -> list[dict[str, object]]:
    """``count`` chained records of ``agent`` (registrador frames from ``frame``, one a second),
    the one at seq ``broken`` naming another record before it."""
    out: list[dict[str, object]] = []
    prev = GENESIS
    for seq in range(1, count + 1):
        rec = {**speed(A, frame + seq - 1, 60.0 + seq), "agent": agent, "seq": seq,
               "prev": "f" * 64 if seq == broken else prev}
        prev = record_hash(rec)
        out.append(rec)
    return out


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Keyring, object]:
    ca_key, ca_cert = identity.make_ca("test CA")
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(ca_key, ca_cert, A, "vehicle", key.public_key())
    (tmp_path / "ca.crt").write_bytes(identity.cert_pem(ca_cert))
    write_entries(tmp_path / "keyring.json", [entry_json(cert)])
    return tmp_path, load_keyring(tmp_path / "keyring.json", ca_cert), key


def _ingest(store: Store, key: object, recs: list[dict[str, object]], agent: str = "a1") -> None:
    last = recs[-1]
    cp = sign_checkpoint(key, A, agent, int(str(last["seq"])),  # type: ignore[arg-type]
                         record_hash(last)).json()
    answer = Ingest(store, lambda: frozenset({A})).handle(
        TOPIC, encode_batch(A, agent, recs, checkpoint=cp))
    assert answer is not None
    assert answer[1].stored == [(1, len(recs))]


def _problems(store: Store, keyring: Keyring) -> set[tuple[str, int | None, str]]:
    return {(p.agent, p.seq, p.cause) for p in check_store(store, keyring).problems}


def _sql(store: Store, *statements: str) -> None:
    store.apply([(sql, [()]) for sql in statements])


def test_the_ingest_writes_no_link_for_a_stored_record(store_url: str,
                                                       signed: tuple[Path, Keyring, object]
                                                       ) -> None:
    folder, keyring, key = signed
    store = open_store(store_url)
    try:
        recs = _records("a1", 5)
        _ingest(store, key, recs)
        rows = [(int(s), str(h), p) for s, h, p in store._read(
            "SELECT seq, hash, prev FROM records ORDER BY seq")]
        # each row carries the hash of the record as received and its prev (the hash before)
        assert rows == [(n, record_hash(r), r["prev"]) for n, r in enumerate(recs, 1)]
        assert store._read("SELECT count(*) FROM links")[0][0] == 0
        assert ChainVerifier(store, folder / "ca.crt", folder / "keyring.json").run_once() == 0
        assert store._read("SELECT seq FROM chain_state")[0][0] == 5
        assert store._read("SELECT state FROM checkpoints") == [("good",)]
        assert _problems(store, keyring) == set()
    finally:
        store.close()


def test_a_store_of_the_old_layout_migrates_and_verifies(store_url: str,
                                                         signed: tuple[Path, Keyring, object]
                                                         ) -> None:
    folder, keyring, key = signed
    store = open_store(store_url)
    try:
        _ingest(store, key, _records("a1", 8))
        b2 = _records("b2", 3, frame=101)
        _ingest(store, key, b2, agent="b2")
        # back to the layout before 018: a "stored" link for every stored record, no hash or
        # prev in the rows; and what such a store may hold besides: a hash-only entry (b2's
        # seq 4, refused), a stored record whose row is gone (b2's seq 3: frota verify says
        # missing before and after)
        _sql(store,
             "INSERT INTO links (vehicle, agent, seq, hash, prev, state, received_ms) "
             "SELECT vehicle, agent, seq, hash, prev, 'stored', received_ms FROM records",
             "ALTER TABLE records DROP COLUMN prev",
             "ALTER TABLE records DROP COLUMN hash",
             "DELETE FROM migrations WHERE name = '019_records_hash'")
        refused = {**speed(A, 104, 1.0), "agent": "b2", "seq": 4}
        _sql(store, "INSERT INTO links (vehicle, agent, seq, hash, prev, state, received_ms) "
                    f"VALUES ('{A}', 'b2', 4, '{record_hash(refused)}', "
                    f"'{record_hash(b2[-1])}', 'rejected', 0)")
        gate = ("SELECT set_config('frota.prune', 'on', true)" if store.dialect == "postgresql"
                else "INSERT INTO prune_gate (opened_ms) VALUES (0)")
        _sql(store, gate, "DELETE FROM records WHERE agent = 'b2' AND seq = 3",
             "DELETE FROM prune_gate")
    finally:
        store.close()
    store = open_store(store_url)   # migrates
    try:
        # the stored records' links moved into their rows; the others stay links
        assert sorted((str(a), int(s), str(st)) for a, s, st in store._read(
            "SELECT agent, seq, state FROM links")) == [
            ("b2", 3, "stored"), ("b2", 4, "rejected")]
        assert store._read("SELECT count(*) FROM records WHERE hash IS NULL OR prev IS NULL"
                           )[0][0] == 0
        # b2's seq 3 was received and stored, and is gone; seq 4 is not covered by a
        # checkpoint; frames 104-... are b2's own, 9-100 never were
        assert _problems(store, keyring) == {
            ("b2", 3, "missing"), ("b2", 4, "unsigned"), ("registrador", 9, "missing")}
        verifier = ChainVerifier(store, folder / "ca.crt", folder / "keyring.json")
        assert verifier.run_once() == 0
        assert sorted((str(a), int(s)) for a, s in store._read(
            "SELECT agent, seq FROM chain_state")) == [("a1", 8), ("b2", 4)]
        # and it takes new records in the new layout, the chain going on from the old one
        more = _records("a1", 10)
        cp = sign_checkpoint(key, A, "a1", 10, record_hash(more[-1])).json()  # type: ignore[arg-type]
        Ingest(store, lambda: frozenset({A})).handle(
            TOPIC, encode_batch(A, "a1", more[8:], checkpoint=cp))
        assert verifier.run_once() == 0
        assert not {p for p in _problems(store, keyring) if p[0] == "a1"}
    finally:
        store.close()


def test_tampering_is_found_with_hashes_in_the_rows(store_url: str,
                                                   signed: tuple[Path, Keyring, object]) -> None:
    folder, keyring, key = signed
    store = open_store(store_url)
    try:
        recs = _records("a1", 10)
        _ingest(store, key, recs)
        assert _problems(store, keyring) == set()
        # seq 3 edited (its hash left as received): altered, and seq 4's prev names the
        # record as received, not as stored
        _sql(store, "UPDATE records SET record = replace(record, '\"kmh\":63', '\"kmh\":163') "
                    "WHERE seq = 3")
        assert _problems(store, keyring) == {("a1", 3, "altered"), ("a1", 4, "chain_break")}
        # ... and its hash column rewritten to match: still a break at seq 4
        edited = {**recs[2], "kmh": 163.0}
        _sql(store, f"UPDATE records SET hash = '{record_hash(edited)}' WHERE seq = 3")
        assert ("a1", 4, "chain_break") in _problems(store, keyring)
        _sql(store, f"UPDATE records SET record = replace(record, '\"kmh\":163', '\"kmh\":63'), "
                    f"hash = '{record_hash(recs[2])}' WHERE seq = 3")
        assert _problems(store, keyring) == set()
        # seq 5 and 6 swapped: each says another seq
        _sql(store, "UPDATE records SET seq = -5 WHERE seq = 5",
             "UPDATE records SET seq = 5 WHERE seq = 6", "UPDATE records SET seq = 6 WHERE seq = -5")
        swapped = _problems(store, keyring)
        assert {("a1", 5, "altered"), ("a1", 6, "altered")} <= swapped
        _sql(store, "UPDATE records SET seq = -5 WHERE seq = 5",
             "UPDATE records SET seq = 5 WHERE seq = 6", "UPDATE records SET seq = 6 WHERE seq = -5")
        # seq 7 deleted (its hash goes with it): missing
        gate = ("SELECT set_config('frota.prune', 'on', true)" if store.dialect == "postgresql"
                else "INSERT INTO prune_gate (opened_ms) VALUES (0)")
        _sql(store, gate, "DELETE FROM records WHERE seq = 7", "DELETE FROM prune_gate")
        assert _problems(store, keyring) == {("a1", 7, "missing"), ("registrador", 7, "missing")}
        # a record inserted after the last, hash and prev as the ingest writes them: no
        # signed checkpoint covers it; one inserted with no hash never came through the ingest
        forged = {**speed(A, 11, 99.0), "agent": "a1", "seq": 11, "prev": record_hash(recs[-1])}
        import orjson

        _sql(store, "INSERT INTO records (vehicle, agent, seq, ts, ts_ms, kind, record, "
                    "received_ms, hash, prev) VALUES "
                    f"('{A}', 'a1', 11, '{forged['ts']}', 0, 'speed', "
                    f"'{orjson.dumps(forged).decode()}', 0, '{record_hash(forged)}', "
                    f"'{forged['prev']}')")
        assert _problems(store, keyring) == {("a1", 7, "missing"), ("registrador", 7, "missing"),
                                             ("a1", 11, "unsigned")}
        other = {**forged, "seq": 12, "prev": record_hash(forged)}
        _sql(store, "INSERT INTO records (vehicle, agent, seq, ts, ts_ms, kind, record, "
                    f"received_ms) VALUES ('{A}', 'a1', 12, '{other['ts']}', 0, 'speed', "
                    f"'{orjson.dumps(other).decode()}', 0)")
        assert ("a1", 12, "inserted") in _problems(store, keyring)
        # the live verifier walks the rows: it stops at the gap at seq 7
        assert ChainVerifier(store, folder / "ca.crt", folder / "keyring.json").run_once() == 0
        assert store._read("SELECT seq FROM chain_state")[0][0] == 6
    finally:
        store.close()


def test_the_live_verifier_finds_a_break_in_the_rows(store_url: str,
                                                     signed: tuple[Path, Keyring, object]
                                                     ) -> None:
    folder, _, key = signed
    store = open_store(store_url)
    try:
        _ingest(store, key, _records("a1", 6, broken=4))
        verifier = ChainVerifier(store, folder / "ca.crt", folder / "keyring.json")
        assert verifier.run_once() == 1
        assert [tuple(r) for r in store._read("SELECT agent, seq, cause FROM integrity")] == [
            ("a1", 4, "chain_break")]
        assert store._read("SELECT seq FROM chain_state")[0][0] == 6
    finally:
        store.close()


def test_stretches_the_ingest_hands_the_verifier(store_url: str,
                                                 signed: tuple[Path, Keyring, object]) -> None:
    # With a live verifier running, a batch stored whole is checked inside as it is committed
    # (a break there is found by the ingest) and handed over as a stretch: the verifier checks
    # where it meets the chain before it. What it was not handed it reads from the store.
    folder, keyring, key = signed
    store = open_store(store_url)
    try:
        verifier = ChainVerifier(store, folder / "ca.crt", folder / "keyring.json")
        recs = _records("a1", 9, broken=2)   # seq 2 names another record before it
        recs[6]["prev"] = "e" * 64           # and seq 7 too (the first of the third batch)
        for seq in range(7, 10):             # (the chain goes on from seq 7 as it now is)
            if seq > 7:
                recs[seq - 1]["prev"] = record_hash(recs[seq - 2])
        ingest = Ingest(store, lambda: frozenset({A}))
        for part in (recs[0:3], recs[3:6], recs[6:9]):
            last = part[-1]
            cp = sign_checkpoint(key, A, "a1", int(str(last["seq"])),  # type: ignore[arg-type]
                                 record_hash(last)).json()
            ingest.handle(TOPIC, encode_batch(A, "a1", part, checkpoint=cp))
        # seq 2's break was found inside its batch, at ingest
        assert [tuple(r) for r in store._read("SELECT seq, cause FROM integrity")] == [
            (2, "chain_break")]
        assert verifier.run_once() == 1      # seq 7: where the third stretch meets the second
        assert sorted(tuple(r) for r in store._read("SELECT seq, cause FROM integrity")) == [
            (2, "chain_break"), (7, "chain_break")]
        assert store._read("SELECT seq FROM chain_state")[0][0] == 9
        assert store._read("SELECT count(*) FROM checkpoints WHERE state = 'good'")[0][0] == 3
        assert store.fresh_stretches is not None
        assert store.fresh_stretches.take(A, "a1", 4) is None   # walked: none kept
        # frota verify finds the same from the records themselves
        found = {(p.seq, p.cause) for p in check_store(store, keyring).problems}
        assert {(2, "chain_break"), (7, "chain_break")} <= found
        # a resend is not handed over (nothing new stored): the verifier has nothing to redo
        ingest.handle(TOPIC, encode_batch(A, "a1", recs[3:6]))
        assert store.fresh_stretches.take(A, "a1", 4) is None
        assert verifier.run_once() == 0
    finally:
        store.close()


def test_a_stretch_past_a_gap_waits_for_the_seqs_before_it(
        store_url: str, signed: tuple[Path, Keyring, object]) -> None:
    folder, keyring, _ = signed
    store = open_store(store_url)
    try:
        verifier = ChainVerifier(store, folder / "ca.crt", folder / "keyring.json")
        recs = _records("a1", 6)
        ingest = Ingest(store, lambda: frozenset({A}))
        ingest.handle(TOPIC, encode_batch(A, "a1", recs[3:]))   # live records first
        assert verifier.run_once() == 0
        assert store._read("SELECT count(*) FROM chain_state")[0][0] == 0
        ingest.handle(TOPIC, encode_batch(A, "a1", recs[:3]))   # then the backlog
        assert verifier.run_once() == 0
        assert store._read("SELECT seq FROM chain_state")[0][0] == 6
        assert _problems(store, keyring) == {("a1", 1, "unsigned")}
    finally:
        store.close()


def test_the_batch_hashes_are_each_records_hash() -> None:
    # collector/intake.py hashes a batch's records together (protocols/canonical_batch.py):
    # record by record the hash record_hash gives, or None where that path steps aside
    from collector.intake import record_hashes
    from protocols.chain import try_hash

    def hashes(objs: list[object]) -> list[str | None]:
        return [None if form is None else form[0] for form in record_hashes(objs)]

    recs: list[object] = list(_records("a1", 3))
    assert hashes(recs) == [try_hash(r) for r in recs]
    # a double the batch path does not write (in [1e-6, 1e-5)): that record alone is left
    odd = {**speed(A, 9, 61.0), "x": 1e-6}
    assert hashes([*recs, odd]) == [*(try_hash(r) for r in recs), None]
    # one record the batch path cannot take (nested, or not a record) leaves every record to
    # record_hash: the hashes it gives are still each record's own
    mixed = [*recs, {"x": [1]}, 7]
    got = hashes(mixed)
    assert all(h is None or h == try_hash(r) for h, r in zip(got, mixed, strict=True))
