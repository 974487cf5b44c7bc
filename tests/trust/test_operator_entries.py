"""Operator entries (``frota collector enter``, agent ``operator``) are chained, record who entered
them and are signed by the collector's certified key, so ``frota verify`` and the live verifier
check them like an agent's records: an entry edited, deleted or inserted in the store is found."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.chaincheck import check_store
from collector.entries import EntryError, EntrySeal, enter
from collector.store import Store, open_store
from collector.verifier import ChainVerifier
from frota.cli import main
from protocols import identity
from protocols.chain import GENESIS, Checkpoint, checkpoint_valid
from protocols.keyring import entry_json, load_keyring, write_entries
from protocols.records import now_ms

A = "ABC1D23"
T0 = 1_772_460_000_000
INCIDENT = {"vehicle": A, "ts": "2026-03-02T15:00:00.000Z", "kind": "incident",
            "cause": "breakdown"}


@pytest.fixture
def fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A provisioned fleet (its collector.toml has [trust]), a registry with A, an empty store."""
    folder = tmp_path / "fleet"
    assert main(["provision", "init", str(folder), "--broker-user", "nobody-here"]) == 0
    (folder / "registry.json").write_text(json.dumps(
        {"lines": [], "drivers": [], "vehicles": [{"id": A, "seats": 46}]}))
    open_store(str(folder / "collector.db")).close()
    capsys.readouterr()
    return folder


def _enter(folder: Path, capsys: pytest.CaptureFixture[str], *extra: str,
           source: tuple[str, ...] = ()) -> tuple[int, dict[str, object] | None, str]:
    args = ["collector", "enter", "incident",
            *(source or ("--config", str(folder / "collector.toml"))),
            "--vehicle", A, "--ts", "2026-03-02T12:00:00-03:00", "--cause", "breakdown", *extra]
    code = main(args)
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else None), out.err


def _verify(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["verify", "--config", str(folder / "collector.toml")])
    return code, capsys.readouterr().out


def _canonical_sha256(rec: dict[str, object]) -> str:
    """By hand: these records hold only ASCII strings and small integers, so their RFC 8785 form
    is JSON with sorted keys and no spaces (docs/records.md, "Canonical form")."""
    text = json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def test_entries_are_chained_signed_and_verified(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, first, _ = _enter(fleet, capsys, "--by", "maria")
    assert code == 0
    assert first is not None
    assert (first["agent"], first["seq"], first["by"], first["prev"]) == (
        "operator", 1, "maria", GENESIS)
    assert first["ts"] == "2026-03-02T15:00:00.000Z"
    code, second, _ = _enter(fleet, capsys)  # --by defaults to the OS user
    assert code == 0
    assert second is not None
    assert second["seq"] == 2
    assert isinstance(second["by"], str)
    assert second["by"]
    assert second["prev"] == _canonical_sha256(first)
    store = open_store(str(fleet / "collector.db"), create=False)
    try:
        rows = store._read("SELECT seq, hash, key, sig FROM checkpoints WHERE agent = 'operator' "
                           "ORDER BY seq")
        assert [(int(r[0]), str(r[1])) for r in rows] == [
            (1, _canonical_sha256(first)), (2, _canonical_sha256(second))]
        collector_cert = identity.load_cert_file(fleet / "collectors" / "main" / "signing.crt")
        for seq, digest, kid, sig in rows:
            assert checkpoint_valid(identity.public_key_of(collector_cert), A, "operator",
                                    Checkpoint(int(seq), str(digest), str(kid), str(sig)))
        # the collector's live verifier finds them good (a collector's key, not the vehicle's)
        verifier = ChainVerifier(store, fleet / "ca.crt", fleet / "keyring.json")
        assert verifier.run_once() == 0
        assert sorted(str(r[0]) for r in store._read("SELECT state FROM checkpoints")) == [
            "good", "good"]
    finally:
        store.close()
    code, out = _verify(fleet, capsys)
    assert code == 0, out
    assert "2 operator entr(ies)" in out
    assert "intact" in out


def _tamper(folder: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    """Edit the SQLite file as someone with access to it would (past the delete guard)."""
    conn = sqlite3.connect(folder / "collector.db")
    try:
        conn.execute("DROP TRIGGER IF EXISTS records_delete_guard")
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


def test_an_entry_edited_deleted_or_inserted_in_the_store_is_found(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for by in ("maria", "joao", "ana"):
        assert _enter(fleet, capsys, "--by", by)[0] == 0
    # edited: who entered it
    _tamper(fleet, "UPDATE records SET record = replace(record, '\"maria\"', '\"ana\"') "
            "WHERE agent = 'operator' AND seq = ?", (1,))
    code, out = _verify(fleet, capsys)
    assert code == 3
    assert f"{A} agent operator seq 1: altered" in out
    # deleted
    _tamper(fleet, "DELETE FROM records WHERE agent = 'operator' AND seq = ?", (2,))
    code, out = _verify(fleet, capsys)
    assert f"{A} agent operator seq 2: missing" in out
    # inserted by hand, as the store held entries before they were signed
    forged = dict(INCIDENT, agent="operator", seq=4, cause="force_majeure")
    _tamper(fleet, "INSERT INTO records (vehicle, agent, seq, ts, ts_ms, kind, record, "
            "received_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (A, "operator", 4, forged["ts"], T0, "incident", json.dumps(forged), T0))
    code, out = _verify(fleet, capsys)
    assert code == 3
    assert f"{A} agent operator seq 4: inserted: operator entry neither chained nor signed" in out


def test_without_the_collector_key_an_entry_is_stored_unsigned_and_said_so(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stored, err = _enter(fleet, capsys, "--by", "maria",
                               source=("--db", str(fleet / "collector.db")))
    assert code == 0
    assert stored is not None
    assert stored["by"] == "maria"
    assert "stored unsigned" in err
    code, out = _verify(fleet, capsys)
    assert code == 3
    assert f"{A} agent operator seq 1: unsigned" in out


@pytest.mark.parametrize("by", ["", " maria", "a" * 65, "ma\nria"])
def test_a_bad_by_is_a_one_line_error(fleet: Path, capsys: pytest.CaptureFixture[str],
                                      by: str) -> None:
    code, _, err = _enter(fleet, capsys, "--by", by)
    assert code == 1
    assert "--by" in err
    assert "Traceback" not in err


@pytest.fixture
def any_store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.close()


def test_entries_get_the_next_seq_and_chain_on_both_backends(any_store: Store,
                                                             tmp_path: Path) -> None:
    now = now_ms()  # received after the test CA certified the key (valid then)
    ca_key, ca_cert = identity.make_ca("test CA")
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(ca_key, ca_cert, "main", "collector", key.public_key())
    write_entries(tmp_path / "keyring.json", [entry_json(cert)])
    keyring = load_keyring(tmp_path / "keyring.json", ca_cert)
    seal = EntrySeal(identity.key_id(key.public_key()), key.sign)
    first = enter(any_store, None, dict(INCIDENT), now, "maria", seal)
    second = enter(any_store, None, dict(INCIDENT, agent="a1", seq=99, by="x", prev="y"), now,
                   "joao", seal)
    assert first == {"vehicle": A, "ts": "2026-03-02T15:00:00.000Z", "kind": "incident",
                     "agent": "operator", "seq": 1, "cause": "breakdown", "by": "maria",
                     "prev": GENESIS}
    # what the caller says of agent, seq, by and prev is not what is stored
    assert (second["agent"], second["seq"], second["by"], second["prev"]) == (
        "operator", 2, "joao", _canonical_sha256(first))
    report = check_store(any_store, keyring)
    assert report.problems == []
    assert report.operator_entries == 2
    assert report.checkpoints_good == 2
    with pytest.raises(EntryError):
        enter(any_store, None, dict(INCIDENT, cause="nope"), now, "maria", seal)
    # a vehicle's key does not sign operator entries
    bus = identity.new_signing_key()
    bus_cert = identity.certify_signing_key(ca_key, ca_cert, A, "vehicle", bus.public_key())
    write_entries(tmp_path / "keyring.json", [entry_json(cert), entry_json(bus_cert)])
    keyring = load_keyring(tmp_path / "keyring.json", ca_cert)
    enter(any_store, None, dict(INCIDENT), now, "ana",
          EntrySeal(identity.key_id(bus.public_key()), bus.sign))
    causes = {(p.seq, p.cause) for p in check_store(any_store, keyring).problems}
    assert (3, "bad_signature") in causes
