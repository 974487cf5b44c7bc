"""The digital disc at rest in the store (issue 15 item 6): compacted vehicle-days, read back as
the rows they replaced, the delete guards, the late record that reopens a day, frota verify.

Hand-worked days. "Now" is 2026-12-01T15:00Z = 12:00 in São Paulo (UTC-3), local day
2026-12-01. With compact_after_days = 2 a local day D is compacted when 2026-12-01 - D > 2
days: 2026-11-28 and before. The bus records every 3 hours from 2026-11-27T03:00Z (local
2026-11-27 00:00) to 2026-12-01T12:00Z, 8 instants a local day, a registrador speed sample
(with its frame number and bytes) and a GPS position at each: local days 27 and 28 November
are compacted (2 × 8 × 2 = 32 records); the record at 2026-11-29T00:00Z is local
2026-11-28 21:00 (compacted, although its UTC date is the 29th); 29 November on stay rows.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

from collector import compaction, store_disc
from collector.chaincheck import check_store
from collector.ingest import Ingest
from collector.rules.profile import load_profiles
from collector.store import INSERT_RECORD, Store, StoreError, record_row
from protocols import identity
from protocols.canonical import canonical
from protocols.chain import GENESIS, record_hash, sign_checkpoint
from protocols.keyring import Keyring, entry_json, load_keyring, write_entries
from protocols.records import make_record, ms_to_ts, ts_to_ms
from protocols.uplink import encode_batch

BUS = "ABC1D23"
AGENT = "a1"
TOPIC = f"frota/v1/{BUS}/up"
NOW = ts_to_ms("2026-12-01T15:00:00Z")
START = ts_to_ms("2026-11-27T03:00:00Z")
STEP = 3 * 3_600_000
INSTANTS = 36   # 2026-11-27T03:00Z + 35 × 3 h = 2026-12-01T12:00Z


def _records(count: int = INSTANTS, first_seq: int = 1, prev: str = GENESIS,
             start: int = START) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seq = first_seq
    for n in range(count):
        ts = ms_to_ts(start + n * STEP)
        frame = first_seq // 2 + n + 1
        for rec in (make_record("speed", BUS, ts, kmh=float(40 + n % 50), odometer_m=1000 * n,
                                ignition=True, device_seq=frame, raw=f"aa55{frame:04x}"),
                    make_record("position", BUS, ts, lat=-23.5 + n * 1e-3, lon=-46.6,
                                kmh=float(40 + n % 50))):
            rec = {**rec, "agent": AGENT, "seq": seq, "prev": prev}
            prev = record_hash(rec)
            out.append(rec)
            seq += 1
    return out


def _late(seq: int, prev: str, ts: str) -> list[dict[str, Any]]:
    """A late GPS position under the next seq (its seq follows the chain, its time is old)."""
    rec = {**make_record("position", BUS, ts, lat=-23.4, lon=-46.5, kmh=12.0),
           "agent": AGENT, "seq": seq, "prev": prev}
    return [rec]


def _signed(tmp_path: Path) -> tuple[Any, Keyring]:
    ca_key, ca_cert = identity.make_ca("test CA")
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(ca_key, ca_cert, BUS, "vehicle", key.public_key())
    write_entries(tmp_path / "keyring.json", [entry_json(cert)])
    (tmp_path / "ca.crt").write_bytes(identity.cert_pem(ca_cert))
    return key, load_keyring(tmp_path / "keyring.json", ca_cert)


def _ingest(store: Store, records: list[dict[str, Any]], key: Any) -> None:
    last = records[-1]
    cp = sign_checkpoint(key, BUS, AGENT, int(last["seq"]), record_hash(last)).json()
    answer = Ingest(store, lambda: frozenset({BUS})).handle(
        TOPIC, encode_batch(BUS, AGENT, records, checkpoint=cp))
    assert answer is not None


def _compact(store: Store, **kw: Any) -> list[compaction.DayCompacted]:
    return compaction.compact(store, None, load_profiles(), now_ms=NOW, after_days=2,
                              pause_s=0, **kw)


def test_compacted_days_read_back_as_the_rows_they_replaced(store: Store, tmp_path: Path) -> None:
    key, keyring = _signed(tmp_path)
    records = _records()
    _ingest(store, records, key)
    before = list(store.records(BUS))
    assert len(before) == 2 * INSTANTS
    assert check_store(store, keyring).problems == []
    done = _compact(store)
    assert [(d.day, d.records) for d in done] == [("2026-11-27", 16), ("2026-11-28", 16)]
    assert int(store._read("SELECT count(*) FROM records")[0][0]) == 2 * INSTANTS - 32
    days = store_disc.days(store, BUS)
    assert [(d.day, d.records, d.first_ms, d.last_ms) for d in days] == [
        ("2026-11-27", 16, START, START + 7 * STEP),
        ("2026-11-28", 16, START + 8 * STEP, START + 15 * STEP)]
    assert days[0].first_hash == record_hash(records[0])
    assert days[1].last_hash == record_hash(records[31])
    # every reader of records sees the same records, in the same order
    assert list(store.records(BUS)) == before
    window = (START + 6 * STEP, START + 10 * STEP)  # across the compacted days and a row day
    assert list(store.records(BUS, *window)) == [
        t for t in before if window[0] <= ts_to_ms(json.loads(t)["ts"]) < window[1]]
    assert store.count(BUS) == store.count() == 2 * INSTANTS
    assert store.vehicle_ids() == [BUS]
    # frota verify's check still passes: the chain is whole, every hash its link's
    report = check_store(store, keyring)
    assert report.problems == []
    assert report.records == 2 * INSTANTS
    # compacting again changes nothing
    assert _compact(store) == []


def _reads(store: Store) -> list[Any]:
    """What every summary reader gives (the pages', frota demo's)."""
    lo, hi = START - 1, NOW
    mid = START + 9 * STEP + 1  # inside a compacted day... and one of rows
    totals = store.totals()
    return [totals.records, store.vehicle_summary(BUS), store.events(BUS, lo, hi),
            store.samples(BUS, "position", lo, hi), store.speeds(BUS, "speed", lo, hi),
            store.speeds(BUS, "position", START, START + 10 * STEP),
            store.latest(BUS, "speed"), store.latest(BUS, "position", mid),
            store.latest(BUS, "speed", START + 3 * STEP), store.latest(BUS, "trip")]


def test_summary_readers_see_the_same_after_compaction(store: Store, tmp_path: Path) -> None:
    key, _ = _signed(tmp_path)
    records = _records()
    records.insert(5, {**make_record("door", BUS, records[4]["ts"], door=1, boarded=3,
                                     alighted=2)})
    # the door record (not chained) goes in first, under its own agent
    store.put([record_row({**records.pop(5), "agent": "doors", "seq": 1}, NOW)])
    _ingest(store, records, key)
    before = _reads(store)
    assert before[1].boarded == 3
    _compact(store)
    assert store_disc.days(store, BUS)
    assert _reads(store) == before


def test_only_compaction_and_prune_delete(store: Store, store_url: str, tmp_path: Path) -> None:
    key, _ = _signed(tmp_path)
    _ingest(store, _records(), key)
    _compact(store)
    wrong = (sqlite3.DatabaseError, psycopg.Error, StoreError)
    # a row of a day not compacted: refused, whatever the route
    with pytest.raises(wrong, match="moved only by frota collector compact, into their "
                       "compacted day"):
        store.apply([("DELETE FROM records WHERE ts_ms >= ?", [(NOW - 86_400_000,)])])
    # a row inside a compacted day (written past the ingest, which would reopen the day): the
    # compaction alone may delete such a row, and it did not write this one
    late = {**_late(99, GENESIS, ms_to_ts(START + 1000))[0]}
    store.apply([(INSERT_RECORD, [record_row(late, NOW)])])
    with pytest.raises(wrong, match="moved only by frota collector compact"):
        store.apply([("DELETE FROM records WHERE seq = ?", [(99,)])])
    # a compacted day: its row may not go while its records are not rows again
    day_refused = ("a compacted day is deleted only by frota collector prune, past the retention "
                   "period, or once a late record has made its records rows again")
    with pytest.raises(wrong, match=day_refused):
        store.apply([("DELETE FROM disc_days", [()])])
    if store.dialect == "postgresql":  # TRUNCATE says the same
        with psycopg.connect(store_url, autocommit=True) as conn, pytest.raises(
                psycopg.Error, match=day_refused):
            conn.execute("TRUNCATE disc_days")
    assert len(store_disc.days(store, BUS)) == 2
    assert store.count() == 2 * INSTANTS + 1   # the row inside the day is read beside it


def test_a_late_record_reopens_its_compacted_day(store: Store, tmp_path: Path) -> None:
    key, keyring = _signed(tmp_path)
    records = _records()
    _ingest(store, records, key)
    _compact(store)
    before = list(store.records(BUS))
    # a late GPS position of 2026-11-28 12:00:01 local, under the next seq
    late = _late(len(records) + 1, record_hash(records[-1]), "2026-11-28T15:00:01.000Z")
    _ingest(store, late, key)
    assert [d.day for d in store_disc.days(store, BUS)] == ["2026-11-27"]
    assert [tuple(r) for r in store._read("SELECT day, records FROM disc_reopened")] == [
        ("2026-11-28", 16)]
    after = list(store.records(BUS))
    assert len(after) == len(before) + 1
    # the day's rows again carry their samples' km/h (migration 022_records_kmh): the JSON's
    kmh = store._read(f"SELECT kmh, {store._number('kmh')} FROM records WHERE kind IN "
                      "('speed', 'position')")
    assert len(kmh) > 10
    assert all(v is not None for v, _ in kmh)
    assert all(v == float(number) for v, number in kmh)
    # (the late record kept in its canonical form, as the ingest keeps what it hashes)
    assert [t for t in after if t not in {canonical(r).decode() for r in late}] == before
    assert check_store(store, keyring).problems == []
    assert store._read("SELECT count(*) FROM integrity")[0][0] == 0
    # a resend of a compacted record is stored once: its day reopens, the insert skips it
    _ingest(store, records[:2], key)
    assert store.count() == len(before) + 1
    # the next run compacts both days again
    done = _compact(store)
    assert [(d.day, d.records) for d in done] == [("2026-11-27", 16), ("2026-11-28", 17)]
    assert list(store.records(BUS)) == after
    assert store._read("SELECT count(*) FROM disc_reopened")[0][0] == 0
    assert check_store(store, keyring).problems == []


def test_reopened_day_altered_in_the_store_is_a_chain_break(store: Store, tmp_path: Path) -> None:
    key, _ = _signed(tmp_path)
    records = _records()
    _ingest(store, records, key)
    _compact(store)
    # someone rewrites the 27th's blob with one record changed (the link keeps the true hash)
    day = store_disc.days(store, BUS)[0]
    rows = store_disc.day_rows(store, day)
    texts = [r.text for r in rows]
    texts[3] = texts[3].replace('"lon":-46.6', '"lon":-46.7')
    from collector.disc import encode_day
    store.apply([("UPDATE disc_days SET blob = ? WHERE day = ?",
                  [(encode_day(texts), day.day)])])
    late = _late(len(records) + 1, record_hash(records[-1]), ms_to_ts(START + 1000))
    _ingest(store, late, key)
    causes = [tuple(r) for r in store._read("SELECT seq, cause FROM integrity")]
    assert (4, "chain_break") in causes


def test_compact_command(store_url: str, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    from collector.store import open_store
    from frota.cli import main

    opened = open_store(store_url)
    key, _ = _signed(tmp_path)
    _ingest(opened, _records(), key)
    opened.close()
    (tmp_path / "fleet.json").write_text(json.dumps(
        {"lines": [], "drivers": [], "vehicles": [{"id": BUS, "seats": 46, "profile": "SP"}]}))
    config = tmp_path / "collector.toml"
    where = (f'dsn = "{store_url}"' if store_url.startswith("postgresql")
             else f'path = "{store_url}"')
    config.write_text(f'registry = "{tmp_path / "fleet.json"}"\n[database]\n{where}\n')
    # the command judges on the real clock: N is chosen so that the days past it are 27 and 28
    # November whatever today is (day D is compacted on local day T when T - D > N: N = T - 29 Nov)
    today = datetime.now(ZoneInfo("America/Sao_Paulo")).date()
    older = ["--older-than-days", str((today - date(2026, 11, 29)).days)]
    assert main(["collector", "compact", "--config", str(config), "--dry-run", *older]) == 0
    assert f"{BUS} 2026-11-27: would compact 16 records" in capsys.readouterr().out
    check = open_store(store_url)
    assert store_disc.days(check, BUS) == []
    check.close()
    assert main(["collector", "compact", "--config", str(config), *older]) == 0
    assert f"{BUS} 2026-11-27: compacted 16 records" in capsys.readouterr().out
    # days compacted before migration 017_disc_summary (no summary) get the one compaction
    # writes, at the next run (and only then: --dry-run counts them)
    check = open_store(store_url)
    sql = "SELECT day, summary FROM disc_days ORDER BY day"
    written = [(str(d), bytes(b)) for d, b in check._read(sql)]
    assert [d for d, _ in written] == ["2026-11-27", "2026-11-28"]
    check.apply([("UPDATE disc_days SET summary = NULL WHERE vehicle = ?", [(BUS,)])])
    check.close()
    assert main(["collector", "compact", "--config", str(config), "--dry-run", *older]) == 0
    assert "would summarize 2 compacted vehicle-days" in capsys.readouterr().err
    assert main(["collector", "compact", "--config", str(config), *older]) == 0
    assert "summarized 2 vehicle-days compacted without a disc summary" in \
        capsys.readouterr().err
    check = open_store(store_url)
    assert [(str(d), bytes(b)) for d, b in check._read(sql)] == written
    check.close()
    assert main(["collector", "compact", "--config", str(config), "--older-than-days", "0"]) == 1
    assert "--older-than-days: at least 1" in capsys.readouterr().err


def _runs(seqs: set[int]) -> Any:
    from collector.bundle_links import SeqRuns

    runs = SeqRuns()
    for seq in sorted(seqs):
        runs.add(seq)
    return runs


def test_a_bundle_names_the_time_of_outside_records_in_compacted_days(store: Store,
                                                                        tmp_path: Path) -> None:
    from collector.bundle_links import outside_links

    key, _ = _signed(tmp_path)
    records = _records()
    _ingest(store, records, key)
    chains = [{"agent": AGENT, "first_seq": 1, "last_seq": 40}]
    present = {AGENT: _runs(set(range(1, 41)) - {10, 20, 35})}  # three seqs outside the period
    before = outside_links(store, BUS, chains, present)
    assert [(o["seq"], o["ts"]) for o in before] == [
        (s, records[s - 1]["ts"]) for s in (10, 20, 35)]
    _compact(store)
    assert outside_links(store, BUS, chains, present) == before


@pytest.mark.parametrize("name", ["ba-night"])
def test_live_findings_are_unchanged_after_compaction(name: str, store: Store) -> None:
    from collector import store_live
    from collector.live_rules import SETTLE_MAX_MS
    from tests.collector.test_live_rules import _live, _scenario

    recs, registry = _scenario(name)
    store.put([record_row(r, 0) for r in recs])
    last = max(ts_to_ms(r["ts"]) for r in recs)
    live = _live(store, registry)
    live.evaluate(last, last)
    before = sorted(store.findings()[0])
    assert before
    # three days later every day of the scenario is compacted
    done = compaction.compact(store, None, load_profiles(), now_ms=last + 3 * 86_400_000,
                              pause_s=0)
    assert sum(d.records for d in done) == len(recs)
    assert int(store._read("SELECT count(*) FROM records")[0][0]) == 0
    live.evaluate(last, last)          # nothing arrived: the same findings
    assert sorted(store.findings()[0]) == before
    store_live.reset(store, live.fingerprint)   # the whole store replayed, from compacted days
    live.evaluate(last, last)
    assert sorted(store.findings()[0]) == before
    # judged up to row id 0 (every record is in a compacted day, none a row): the next
    # evaluation is not a replay from the beginning again. The replay's records were days late
    # (against the evaluation before), so its settled boundary went SETTLE_MAX_MS before as_of:
    # the next one feeds the records from there on, and no more
    again = live.evaluate(last, last)
    assert list(again.boundaries.values()) == [last - SETTLE_MAX_MS]
    assert sum(again.replayed.values()) == sum(1 for r in recs
                                               if ts_to_ms(r["ts"]) >= last - SETTLE_MAX_MS)
    assert sorted(store.findings()[0]) == before


def test_one_compaction_at_a_time_and_the_daily_run(store: Store, store_url: str,
                                                    tmp_path: Path) -> None:
    import time

    from collector.store import open_store

    other = open_store(store_url)
    try:
        with compaction.compact_lease(store) as mine:
            assert mine
            with compaction.compact_lease(other) as theirs:
                # PostgreSQL: the advisory lock is taken; SQLite has one writer anyway
                assert theirs == (store.dialect == "sqlite")
        with compaction.compact_lease(other) as theirs:
            assert theirs                           # released
    finally:
        other.close()
    key, _ = _signed(tmp_path)
    _ingest(store, _records(), key)
    runs: list[int] = []

    def once() -> list[compaction.DayCompacted]:
        runs.append(1)
        return _compact(store)

    daily = compaction.DailyCompaction(once, store, every_s=3600, first_after_s=0.01)
    daily.start()
    deadline = time.monotonic() + 30
    while not runs and time.monotonic() < deadline:
        time.sleep(0.01)
    daily.stop()
    assert runs == [1]
    assert [d.day for d in store_disc.days(store, BUS)] == ["2026-11-27", "2026-11-28"]


def _verified(store: Store, tmp_path: Path) -> None:
    """The live verifier's pass over what is stored (it walks the links, checks checkpoints)."""
    from collector.verifier import ChainVerifier

    assert ChainVerifier(store, tmp_path / "ca.crt", tmp_path / "keyring.json").run_once() == 0


def test_links_fold_into_a_compacted_day_and_still_verify(store: Store, tmp_path: Path) -> None:
    from collector import retention
    from collector.bundle_links import outside_links

    key, keyring = _signed(tmp_path)
    records = _records()
    _ingest(store, records, key)
    chains = [{"agent": AGENT, "first_seq": 1, "last_seq": 40}]
    present = {AGENT: _runs(set(range(1, 41)) - {10, 20, 35})}
    outside = outside_links(store, BUS, chains, present)
    _verified(store, tmp_path)
    _compact(store)
    # the 32 compacted records' links are folded into their days; the 40 others are rows that
    # carry their hashes (migration 019_records_hash): no link row at all
    assert store._read("SELECT count(*) FROM links")[0][0] == 0
    assert store._read("SELECT count(*) FROM records WHERE hash IS NOT NULL")[0][0] == \
        2 * INSTANTS - 32
    assert store._read("SELECT count(*) FROM disc_days WHERE links IS NOT NULL")[0][0] == 2
    assert check_store(store, keyring).problems == []
    assert outside_links(store, BUS, chains, present) == outside
    # seq 4 (27 November) rewritten in its blob: seq 5's prev no longer names it
    day = store_disc.days(store, BUS)[0]
    texts = [r.text for r in store_disc.day_rows(store, day)]
    from collector.disc import encode_day
    forged = [json.loads(t) for t in texts]
    forged[3]["lon"] = -46.7

    def put_day(recs: list[dict[str, Any]]) -> set[tuple[int | None, str]]:
        blob = encode_day([json.dumps(r, separators=(",", ":")) for r in recs])
        store.apply([("UPDATE disc_days SET blob = ? WHERE day = ?", [(blob, day.day)])])
        return {(p.seq, p.cause) for p in check_store(store, keyring).problems}

    assert put_day(forged) == {(5, "chain_break")}
    # ... and with every prev after it made again: the end of the day's stretch of the chain
    # (seq 16) no longer hashes to the link kept for it, and seq 17's prev no longer names it
    for i in range(4, 16):
        forged[i]["prev"] = record_hash(forged[i - 1])
    assert put_day(forged) == {(16, "altered"), (17, "chain_break")}
    store.apply([("UPDATE disc_days SET blob = ? WHERE day = ?", [(encode_day(texts), day.day)])])
    # a late record reopens 28 November: its 16 records' links are rows again (beside their
    # records, as rows without a hash), the chain still verifies
    _ingest(store, _late(len(records) + 1, record_hash(records[-1]), "2026-11-28T15:00:01.000Z"),
            key)
    assert store._read("SELECT count(*) FROM links WHERE state = 'stored'")[0][0] == 16
    assert store._read("SELECT count(*) FROM records WHERE hash IS NULL")[0][0] == 16
    assert check_store(store, keyring).problems == []
    # prune past the minimum: the folded day's links come back as hash-only entries
    profiles = load_profiles()
    retention.prune(store, None, profiles, None, now_ms=NOW + 400 * 86_400_000, pause_s=0)
    states = {int(s): str(st) for s, st in store._read("SELECT seq, state FROM links")}
    assert [states[s] for s in range(1, 17)] == ["pruned"] * 16


def test_a_bundle_looks_for_its_outside_records_in_the_nearest_days_first(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seq 20 (2026-11-28T06:00Z, compacted) lies outside a bundle of the other records: the
    compacted days are decoded nearest the period first, and no further once it is found (a
    vehicle kept a year had every compacted day decoded for one bundle)."""
    from collector.bundle_links import outside_links

    key, _ = _signed(tmp_path)
    records = _records()
    _ingest(store, records, key)
    _compact(store)
    assert [d.day for d in store_disc.days(store, BUS)] == ["2026-11-27", "2026-11-28"]
    decoded: list[str] = []
    day_rows = store_disc.day_rows

    def counted(store_: Store, day: store_disc.DiscDay, query: bool = False) -> Any:
        decoded.append(day.day)
        return day_rows(store_, day, query)

    monkeypatch.setattr(store_disc, "day_rows", counted)
    chains = [{"agent": AGENT, "first_seq": 1, "last_seq": 72}]
    present = {AGENT: _runs(set(range(1, 73)) - {20})}
    near = outside_links(store, BUS, chains, present, ts_to_ms("2026-11-29T12:00:00Z"))
    assert [(o["seq"], o["ts"]) for o in near] == [(20, records[19]["ts"])]
    assert decoded == ["2026-11-28"]  # the 27th, further, never decoded
    decoded.clear()
    # from before the 27th: the 27th first, then the 28th, where it is
    far = outside_links(store, BUS, chains, present, ts_to_ms("2026-11-26T12:00:00Z"))
    assert far == near
    assert decoded == ["2026-11-27", "2026-11-28"]


def test_a_compacted_day_whose_folded_links_miss_the_agent_is_not_decoded(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Links folded into the compacted days name agent a1 only: seqs of another agent are not
    looked for in them (nothing decoded), and a1's are."""
    from collector.bundle_links import _packed

    key, _ = _signed(tmp_path)
    records = _records()
    _ingest(store, records, key)
    _verified(store, tmp_path)
    _compact(store)
    days = store_disc.days(store, BUS)
    assert [sorted(store_disc.folded_ends(store, d) or {}) for d in days] == [[AGENT], [AGENT]]
    decoded: list[str] = []
    day_rows = store_disc.day_rows

    def counted(store_: Store, day: store_disc.DiscDay, query: bool = False) -> Any:
        decoded.append(day.day)
        return day_rows(store_, day, query)

    monkeypatch.setattr(store_disc, "day_rows", counted)
    assert _packed(store, BUS, "another-agent", {5, 20}) == {}
    assert decoded == []
    found = _packed(store, BUS, AGENT, {20})
    assert list(found) == [20]
    assert found[20][2] == records[19]["ts"]
    assert decoded == ["2026-11-27", "2026-11-28"]
