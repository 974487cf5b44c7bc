"""Retention (issue 15 items 1-3): the minimum per profile, the keeping period, prune by whole
local days from device time, legal holds, and no other way to delete records.

Hand-worked dates. "Now" is 2026-12-01T15:00Z = 12:00 in São Paulo (UTC-3 all year since 2019),
local day 2026-12-01. 2026-12-01 minus 365 days is 2025-12-01 (no 29 February between), so under
SP's minimum the first instant kept is 2025-12-01 00:00 local = 2025-12-01T03:00Z. With
keep_days = 400 it is 35 days earlier: 2025-10-27 00:00 local = 2025-10-27T03:00Z. Under TO
(America/Araguaina, UTC-3) the minimum of 90 days keeps from 2026-09-02 00:00 local
(2026-12-01 minus 90 days: 29 days of November, 31 of October, 30 of September = 2026-09-02).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from collector import holds, registry, retention
from collector.rules.profile import load_profiles
from collector.store import RECORD_COLUMNS, Store, StoreError, open_store, record_row
from frota.cli import main
from protocols.records import ts_to_ms

SP_BUS, TO_BUS = "ABC1D23", "TOC1A11"
NOW = ts_to_ms("2026-12-01T15:00:00Z")
FLEET = {"lines": [], "drivers": [], "vehicles": [
    {"id": SP_BUS, "seats": 46, "profile": "SP"},
    {"id": TO_BUS, "seats": 46, "profile": "TO"},
]}

#: SP bus: (seq, device time, kept under the minimum of 365 days?, kept with keep_days 400?)
SP_RECORDS = [
    (1, "2025-10-26T15:00:00Z", False, False),  # local 2025-10-26 12:00: 401 days old
    (2, "2025-10-27T03:30:00Z", False, True),   # local 2025-10-27 00:30: exactly 400 days
    (3, "2025-11-30T15:00:00Z", False, True),   # local 2025-11-30: 366 days, one past the minimum
    (4, "2025-12-01T02:30:00Z", False, True),   # UTC date Dec 1, local 2025-11-30 23:30: 366 days
    (5, "2025-12-01T03:30:00Z", True, True),    # local 2025-12-01 00:30: exactly 365 days
    (6, "2025-12-02T15:00:00Z", True, True),    # 364 days: one day younger than the minimum
    (7, "2026-11-30T15:00:00Z", True, True),    # yesterday
]
#: TO bus: (seq, device time, kept under TO's 90 days?)
TO_RECORDS = [
    (1, "2026-09-01T15:00:00Z", False),   # local 2026-09-01: 91 days
    (2, "2026-09-02T03:30:00Z", True),    # local 2026-09-02 00:30: exactly 90 days
    (3, "2026-09-03T15:00:00Z", True),    # 89 days
]


def _rec(vehicle: str, seq: int, ts: str) -> dict[str, Any]:
    return {"vehicle": vehicle, "ts": ts, "kind": "speed", "agent": "a1", "seq": seq, "kmh": 50}


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """The store with the SP and TO buses' records, each with its chain hash in its row (as the
    ingest stores them; the SP bus's) or a stored chain link (a store from before 018; the TO
    bus's)."""
    opened = open_store(store_url)
    rows = [record_row(_rec(SP_BUS, s, ts), NOW, "h", None) for s, ts, _, _ in SP_RECORDS]
    old = [record_row(_rec(TO_BUS, s, ts), NOW) for s, ts, _ in TO_RECORDS]
    opened.put(rows + old)
    opened.apply([("INSERT INTO links (vehicle, agent, seq, hash, prev, state, received_ms) "
                   "VALUES (?, 'a1', ?, 'h', NULL, 'stored', 0)",
                   [(row[0], row[2]) for row in old])])
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def fleet(tmp_path: Path) -> registry.Registry:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(FLEET))
    return registry.load(path)


def _seqs(store: Store, vehicle: str) -> list[int]:
    return [json.loads(text)["seq"] for text in store.records(vehicle)]


def test_the_minimum_of_each_profile_and_its_article() -> None:
    profiles = load_profiles()
    sp, to, ba = (retention.policy(profiles[n], None) for n in ("SP", "TO", "BA"))
    assert (sp.minimum_days, sp.article) == (365, "Decreto SP 29.913/1989 art. 61 §3")
    assert (to.minimum_days, to.article) == (90, "Regulamento TO art. 66 §1")
    assert ba.minimum_days == 365
    assert "no period stated" in ba.article


def test_a_30_day_keeping_period_under_sp_is_refused_with_the_article() -> None:
    with pytest.raises(retention.RetentionError) as err:
        retention.check_keep_days(30, None, load_profiles())
    assert str(err.value) == ("retention.keep_days: 30 days is shorter than the minimum of 365 "
                              "days under profile SP (Decreto SP 29.913/1989 art. 61 §3)")
    retention.check_keep_days(365, None, load_profiles())  # the minimum itself is fine


def _chain_states(store: Store) -> dict[tuple[str, int], str]:
    """What the chain holds for each (vehicle, seq): its link's state, or ``stored`` for a
    record whose row carries its hash (collector/store_chain.py)."""
    states = {(str(v), int(s)): "stored" for v, s in store._read(
        "SELECT vehicle, seq FROM records WHERE hash IS NOT NULL")}
    states.update(((str(v), int(s)), str(st)) for v, s, st in store._read(
        "SELECT vehicle, seq, state FROM links"))
    return states


def test_prune_keeps_the_minimum_by_whole_local_days(store: Store,
                                                     fleet: registry.Registry) -> None:
    done = retention.prune(store, fleet, load_profiles(), None, now_ms=NOW, batch_rows=2)
    assert _seqs(store, SP_BUS) == [s for s, _, kept, _ in SP_RECORDS if kept]
    assert _seqs(store, TO_BUS) == [s for s, _, kept in TO_RECORDS if kept]
    by = {p.vehicle: p for p in done}
    assert (by[SP_BUS].deleted, by[SP_BUS].before_ms) == (4, ts_to_ms("2025-12-01T03:00:00Z"))
    assert (by[TO_BUS].deleted, by[TO_BUS].before_ms) == (1, ts_to_ms("2026-09-02T03:00:00Z"))
    # the chain keeps the pruned records' hashes
    states = _chain_states(store)
    assert [states[(SP_BUS, s)] for s, _, _, _ in SP_RECORDS] == [
        "pruned", "pruned", "pruned", "pruned", "stored", "stored", "stored"]
    logged = store._read("SELECT vehicle, deleted FROM prunes ORDER BY vehicle")
    assert [(str(v), int(d)) for v, d in logged] == [(SP_BUS, 4), (TO_BUS, 1)]


def test_a_longer_keeping_period_deletes_only_past_it(store: Store,
                                                      fleet: registry.Registry) -> None:
    retention.prune(store, fleet, load_profiles(), 400, now_ms=NOW)
    assert _seqs(store, SP_BUS) == [s for s, _, _, kept in SP_RECORDS if kept]
    # TO's minimum is 90 days, but the configured 400 apply to every profile
    assert _seqs(store, TO_BUS) == [1, 2, 3]


def test_a_configured_period_never_goes_below_the_minimum(store: Store,
                                                          fleet: registry.Registry) -> None:
    retention.prune(store, fleet, load_profiles(), 30, now_ms=NOW)  # below: the minimum rules
    assert _seqs(store, SP_BUS) == [5, 6, 7]
    assert _seqs(store, TO_BUS) == [2, 3]


def test_dry_run_deletes_nothing(store: Store, fleet: registry.Registry) -> None:
    done = retention.prune(store, fleet, load_profiles(), None, now_ms=NOW, dry_run=True)
    assert {p.vehicle: p.deleted for p in done} == {SP_BUS: 4, TO_BUS: 1}
    assert len(_seqs(store, SP_BUS)) == 7


def test_a_hold_keeps_its_period_past_the_prune_date_until_released(
        store: Store, fleet: registry.Registry) -> None:
    made = holds.add(store, SP_BUS, ts_to_ms("2025-11-30T00:00:00Z"),
                     ts_to_ms("2025-12-01T00:00:00Z"), "acidente BR-116, processo 123", "ana",
                     NOW)
    done = retention.prune(store, fleet, load_profiles(), None, now_ms=NOW)
    assert _seqs(store, SP_BUS) == [3, 5, 6, 7]   # seq 3 (2025-11-30T15:00Z) held
    assert {p.vehicle: p.held for p in done}[SP_BUS] == 1
    released = holds.release(store, made.id, "bruno", NOW + 1)
    assert (released.made_by, released.released_by, released.released_ms) == ("ana", "bruno",
                                                                               NOW + 1)
    retention.prune(store, fleet, load_profiles(), None, now_ms=NOW)
    assert _seqs(store, SP_BUS) == [5, 6, 7]
    assert [(h.id, h.active) for h in holds.listed(store)] == [(made.id, False)]
    with pytest.raises(holds.HoldError, match="already released by bruno"):
        holds.release(store, made.id, "carla", NOW + 2)


def test_deleting_records_any_other_way_is_refused(store: Store, store_url: str) -> None:
    with pytest.raises(StoreError, match=r"deleted only by frota collector prune, past the "
                       r"retention period, and moved only by frota collector compact, into "
                       r"their compacted day .*art\. 61 §3"):
        store.apply([("DELETE FROM records WHERE vehicle = ?", [(SP_BUS,)])])
    assert len(_seqs(store, SP_BUS)) == 7
    if store.dialect == "sqlite":  # another program on the file
        lite = sqlite3.connect(store_url)
        with pytest.raises(sqlite3.IntegrityError, match="frota collector prune"):
            lite.execute("DELETE FROM records")
        lite.close()
    else:
        with psycopg.connect(store_url, autocommit=True) as conn, pytest.raises(
                psycopg.Error, match="frota collector prune"):
            conn.execute("TRUNCATE records")
    assert len(_seqs(store, SP_BUS)) == 7


def test_a_store_from_before_the_compaction_refusal_text_says_it_after(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A store made by the release before migration 018 refuses with the prune alone named; once
    # opened by this release its guards name the compaction too (same guards, new text).
    import collector.store_pg
    import collector.store_sqlite
    from collector.store_schema import MIGRATIONS

    before = [m.name for m in MIGRATIONS].index("018_refusal_text")
    for module in (collector.store_sqlite, collector.store_pg):
        monkeypatch.setattr(module, "MIGRATIONS", MIGRATIONS[:before])
    delete = [("DELETE FROM records WHERE seq = ?", [(1,)])]
    older = open_store(store_url)
    try:
        # the columns records had then (019_records_hash added hash and prev)
        columns = RECORD_COLUMNS[:11]
        older.apply([(f"INSERT INTO records ({', '.join(columns)}) VALUES "
                      f"({', '.join('?' * len(columns))})",
                      [record_row(_rec(SP_BUS, 1, "2026-11-30T15:00:00Z"), NOW)[:11]])])
        with pytest.raises(StoreError, match=r"prune, past the retention period \(Decreto"):
            older.apply(delete)
    finally:
        older.close()
    monkeypatch.undo()
    store = open_store(store_url)
    try:
        with pytest.raises(StoreError, match="and moved only by frota collector compact"):
            store.apply(delete)
        assert store.count(SP_BUS) == 1
    finally:
        store.close()


def _config(tmp_path: Path, keep: str = "") -> Path:
    (tmp_path / "fleet.json").write_text(json.dumps(FLEET))
    path = tmp_path / "collector.toml"
    path.write_text(f'registry = "fleet.json"\n[database]\npath = "c.db"\n[retention]\n{keep}\n')
    return path


@pytest.mark.parametrize("command", [["prune"], ["run"]])
def test_a_short_keeping_period_stops_the_start_in_one_line(tmp_path: Path,
                                                            command: list[str]) -> None:
    config = _config(tmp_path, "keep_days = 30")
    result = subprocess.run([sys.executable, "-m", "frota", "collector", *command, "--config",
                             str(config)], capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert result.stderr.endswith("retention.keep_days: 30 days is shorter than the minimum of "
                                  "365 days under profile SP (Decreto SP 29.913/1989 art. 61 §3)\n")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "c.db").exists()


def test_prune_and_holds_on_the_command_line(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    assert main(["collector", "hold", "add", "--config", str(config), "--vehicle", SP_BUS,
                 "--since", "2025-11-30", "--until", "2025-12-01", "--reason", "inspeção ARTESP",
                 "--by", "ana"]) == 0
    out = capsys.readouterr().out
    # dates are local days: 2025-11-30 00:00 -03 = 03:00Z
    assert out.startswith(f"hold 1: {SP_BUS} 2025-11-30T03:00:00.000Z → 2025-12-01T03:00:00.000Z"
                          " — inspeção ARTESP (by ana at ")
    assert main(["collector", "hold", "list", "--config", str(config)]) == 0
    assert "active" in capsys.readouterr().out
    assert main(["collector", "prune", "--config", str(config), "--dry-run"]) == 0
    assert main(["collector", "hold", "release", "--config", str(config), "1"]) == 0
    assert "released by" in capsys.readouterr().out
    assert main(["collector", "hold", "release", "--config", str(config), "7"]) == 1


def test_one_prune_at_a_time_on_a_shared_store(store: Store, store_url: str,
                                               fleet: registry.Registry) -> None:
    other = open_store(store_url)
    try:
        with retention.prune_lease(store) as mine:
            assert mine
            with retention.prune_lease(other) as theirs:
                # PostgreSQL: the advisory lock is taken; SQLite has one writer anyway
                assert theirs == (store.dialect == "sqlite")
        with retention.prune_lease(other) as theirs:
            assert theirs                           # released
    finally:
        other.close()
    runs: list[int] = []

    def once() -> list[retention.VehiclePrune]:
        runs.append(1)
        return retention.prune(store, fleet, load_profiles(), None, now_ms=NOW)

    daily = retention.DailyPrune(once, store, every_s=3600, first_after_s=0.01)
    daily.start()
    deadline = time.monotonic() + 10
    while not runs and time.monotonic() < deadline:
        time.sleep(0.01)
    daily.stop()
    assert runs == [1]
    assert _seqs(store, SP_BUS) == [5, 6, 7]


def test_frames_pruned_around_a_hold_are_not_missing_for_verify(
        store_url: str, fleet: registry.Registry) -> None:
    from collector.chaincheck import check_store

    opened = open_store(store_url)
    try:
        # frames 1-7 = seq 1-7 at SP_RECORDS' times; a hold keeps frame 3 (2025-11-30T15:00Z)
        opened.put([record_row({**_rec(SP_BUS, s, ts), "device_seq": s}, NOW)
                    for s, ts, _, _ in SP_RECORDS])
        holds.add(opened, SP_BUS, ts_to_ms("2025-11-30T00:00:00Z"),
                  ts_to_ms("2025-12-01T00:00:00Z"), "processo", "ana", NOW)
        retention.prune(opened, fleet, load_profiles(), None, now_ms=NOW)
        assert _seqs(opened, SP_BUS) == [3, 5, 6, 7]
        frames = [p for p in check_store(opened, None, SP_BUS).problems
                  if p.agent == "registrador"]
        assert frames == []      # 1-2 before, 4 between the held frame and the kept ones: pruned
    finally:
        opened.close()


def test_prune_of_compacted_days_keeps_the_same_records(store: Store,
                                                        fleet: registry.Registry) -> None:
    from collector import compaction, store_disc

    # every local day older than 2 days is compacted: all but seq 7 (yesterday); seqs 3 and 4
    # share local day 2025-11-30
    done = compaction.compact(store, fleet, load_profiles(), now_ms=NOW, pause_s=0)
    assert len(done) == 5 + 3   # SP: 5 local days (seqs 3 and 4 on one); TO: 3
    assert [d.day for d in store_disc.days(store, SP_BUS)] == [
        "2025-10-26", "2025-10-27", "2025-11-30", "2025-12-01", "2025-12-02"]
    assert retention.prune(store, fleet, load_profiles(), None, now_ms=NOW,
                           dry_run=True)[0].deleted == 4
    pruned = retention.prune(store, fleet, load_profiles(), None, now_ms=NOW, pause_s=0)
    assert _seqs(store, SP_BUS) == [s for s, _, kept, _ in SP_RECORDS if kept]
    assert _seqs(store, TO_BUS) == [s for s, _, kept in TO_RECORDS if kept]
    assert {p.vehicle: p.deleted for p in pruned} == {SP_BUS: 4, TO_BUS: 1}
    assert [d.day for d in store_disc.days(store, SP_BUS)] == ["2025-12-01", "2025-12-02"]
    states = _chain_states(store)
    assert [states[(SP_BUS, s)] for s, _, _, _ in SP_RECORDS] == [
        "pruned", "pruned", "pruned", "pruned", "stored", "stored", "stored"]


def test_a_hold_keeps_a_compacted_day_whole(store: Store, fleet: registry.Registry) -> None:
    from collector import compaction

    compaction.compact(store, fleet, load_profiles(), now_ms=NOW, pause_s=0)
    holds.add(store, SP_BUS, ts_to_ms("2025-11-30T00:00:00Z"), ts_to_ms("2025-12-01T00:00:00Z"),
              "acidente BR-116, processo 123", "ana", NOW)
    done = retention.prune(store, fleet, load_profiles(), None, now_ms=NOW, pause_s=0)
    # the hold covers seq 3; its compacted day (local 2025-11-30) holds seq 4 too: kept whole
    assert _seqs(store, SP_BUS) == [3, 4, 5, 6, 7]
    assert {p.vehicle: p.held for p in done}[SP_BUS] == 2
