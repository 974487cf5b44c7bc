"""Chained, signed records end to end: a provisioned fleet (real Mosquitto, the collector as a
process, the agent's uplink), then ``frota verify`` on the store as stored and as tampered with."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from frota.cli import main
from frota.provision import fleet as provisioning
from protocols import identity
from protocols.chain import sign_checkpoint
from protocols.uplink import encode_batch, up_topic
from tests.agent.helpers import wait_until
from tests.trust.broker import connected
from tests.trust.fleet import A, Fleet, capture, running_fleet, speed, uplink, wait_stored

pytestmark = [pytest.mark.mosquitto, pytest.mark.slow]


def _verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(["verify", *args])
    return status, capsys.readouterr().out


def _copy(fleet: Fleet, to: Path) -> Path:
    """A consistent copy of the collector's live database (SQLite's backup API)."""
    src = sqlite3.connect(fleet.db)
    dst = sqlite3.connect(to)
    src.backup(dst)
    src.close()
    dst.close()
    return to


def _genuine(fleet: Fleet, count: int = 20) -> None:
    config = fleet.agent_config(A)
    capture(config, [speed(A, n, kmh=1.0 + n) for n in range(1, count + 1)])
    with uplink(config) as up:
        assert wait_stored(up, count), fleet.log.read_text()
        assert up.gate.counters.bad_signatures == 0


def test_genuine_records_verify_and_every_tampering_is_found_with_its_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_fleet() as fleet:
        _genuine(fleet)
        config = str(fleet.folder / "collector.toml")
        status, out = _verify(capsys, "--config", config)
        assert status == 0, out
        assert "intact" in out
        assert "20 record(s)" in out
        ca = str(fleet.folder / "ca.crt")

        def tampered(name: str, *sql: str) -> tuple[int, str]:
            db = _copy(fleet, tmp_path / f"{name}.db")
            with sqlite3.connect(db) as conn:
                # an intruder goes around the store's guard on deletes (migration 008_retention)
                conn.execute("DROP TRIGGER IF EXISTS records_delete_guard")
                for statement in sql:
                    assert conn.execute(statement).rowcount >= 1, statement
            return _verify(capsys, "--db", str(db), "--ca", ca)

        # edited: seq 5 said 6 km/h (1 + 5); now 142 (stored in its canonical form, the whole
        # double 6.0 written 6: docs/records.md; the LIKE makes the rowcount say it was there)
        status, out = tampered(
            "edited", "UPDATE records SET record = replace(record, '\"kmh\":6,', '\"kmh\":142,') "
            "WHERE seq = 5 AND record LIKE '%\"kmh\":6,%'")
        assert status == 3
        assert f"{A} agent" in out
        assert "seq 5: altered" in out
        # deleted: seq 7 gone
        status, out = tampered("deleted", "DELETE FROM records WHERE seq = 7")
        assert status == 3
        assert "seq 7: missing" in out
        # reordered: seqs 3 and 4 swapped
        status, out = tampered(
            "reordered", "UPDATE records SET seq = -4 WHERE seq = 4",
            "UPDATE records SET seq = 4 WHERE seq = 3", "UPDATE records SET seq = 3 WHERE seq = -4")
        assert status == 3
        assert "seq 3: altered" in out
        assert "seq 4: altered" in out
        # inserted: a record after the last one, as if the bus had sent it
        status, out = tampered(
            "inserted",
            "INSERT INTO records (vehicle, agent, seq, ts, ts_ms, kind, device_seq, device_key, raw,"
            " record, received_ms) SELECT vehicle, agent, 21, ts, ts_ms + 1000, kind, NULL, NULL,"
            " raw, replace(record, '\"seq\":20', '\"seq\":21'), received_ms FROM records "
            "WHERE seq = 20")
        assert status == 3
        assert "seq 21: inserted" in out
        # a revoked bus's older records still verify (the keyring keeps its key, with dates)
        provisioning.revoke(fleet.broker.fleet, A)
        status, out = _verify(capsys, "--config", config)
        assert status == 0, out


def test_forged_and_pre_published_records_are_refused_or_conflicts(
    capsys: pytest.CaptureFixture[str]
) -> None:
    with running_fleet() as fleet:
        config = fleet.agent_config(A)
        seqs = capture(config, [speed(A, n) for n in range(1, 6)])
        assert seqs == [1, 2, 3, 4, 5]
        agent_id = json.loads(
            sqlite3.connect(config.buffer.path).execute(
                "SELECT body FROM record_bodies WHERE seq = 1").fetchone()[0])["agent"]
        incident = {"vehicle": A, "ts": "2026-03-02T14:00:30.000Z", "kind": "incident",
                    "cause": "breakdown", "agent": "operator", "seq": 1}
        # An attacker holding A's broker password (not its key): an "operator" incident, and
        # A's next seqs and frames published first, at 135 km/h.
        forged = [{**speed(A, n, kmh=135.0), "agent": agent_id, "seq": n} for n in (1, 2, 3)]
        frames = [{**speed(A, n, kmh=135.0), "agent": "attacker", "seq": n - 3} for n in (4, 5)]
        with connected(fleet.broker, A, f"frota-{A}") as thief:
            thief.publish(up_topic(A), encode_batch(A, "operator", [incident]))
            thief.publish(up_topic(A), encode_batch(A, agent_id, forged))
            # ... with a checkpoint signed by a key no one certified
            fake = sign_checkpoint(identity.new_signing_key(), A, "attacker", 2, "0" * 64).json()
            thief.publish(up_topic(A), encode_batch(A, "attacker", frames, checkpoint=fake))
        db = sqlite3.connect(fleet.db)
        assert wait_until(lambda: db.execute("SELECT count(*) FROM records").fetchone()[0] == 5)
        with uplink(config) as up:
            assert wait_until(lambda: up.buffer.counts().conflicts == 5), fleet.log.read_text()
            assert up.buffer.counts().pending == 0
        assert db.execute("SELECT count(*) FROM records WHERE agent = 'operator'").fetchone() == (0,)
        reasons = [r for (r,) in db.execute("SELECT reason FROM rejects")]
        assert any("reserved for entries made at the collector" in r for r in reasons)
        kept = db.execute("SELECT seq, cause, record FROM conflicts ORDER BY seq").fetchall()
        assert [(s, c) for s, c, _ in kept] == [(1, "identity"), (2, "identity"),
                                                (3, "identity"), (4, "frame"), (5, "frame")]
        assert all(json.loads(r)["kmh"] == 77.0 for _, _, r in kept)  # the genuine ones, kept
        status, out = _verify(capsys, "--config", str(fleet.folder / "collector.toml"))
        assert status == 3
        assert "conflict" in out
        assert "agent attacker seq 1: unsigned" in out  # no key: nothing it sent is signed
        assert "seq 1: conflict" in out
        # the store saw it too: equipment.integrity findings, with the law's articles
        assert wait_until(lambda: db.execute(
            "SELECT count(*) FROM integrity WHERE cause = 'conflict'").fetchone()[0] == 5)
        assert wait_until(lambda: db.execute(
            "SELECT seq FROM integrity WHERE cause = 'bad_signature' AND agent = 'attacker'"
        ).fetchall() == [(2,)])
        assert wait_until(lambda: db.execute(
            "SELECT count(*) FROM findings WHERE rule = 'equipment.integrity'").fetchone()[0] >= 5,
            timeout=60)
        finding = json.loads(db.execute(
            "SELECT finding FROM findings WHERE rule = 'equipment.integrity'").fetchone()[0])
        assert finding["basis"] == ["CTB art. 105 II", "Resolução CONTRAN 938/2022"]
        assert finding["vehicle"] == A
        assert finding["details"]["cause"] in ("conflict", "chain_break", "bad_signature")
