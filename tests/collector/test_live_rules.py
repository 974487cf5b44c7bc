"""Incremental live rules (collector/live_rules.py) against ``frota check --as-of`` on the same
records: every shipped scenario delivered in bursts, a late backlog hours old delivered last, and
a collector restart (a new evaluator on a reopened store, its state restored from the
checkpoints) — on SQLite and on PostgreSQL. The expected findings are ``frota check``'s (a real
process on the records as JSON Lines), never the live evaluator's own."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from collector import findings, store_live
from collector import registry as fleet
from collector.live_rules import LiveRules
from collector.live_state import CheckpointError, LiveEngine, fork, restore, snapshot
from collector.partitions import FLEET
from collector.rules.profile import load_profiles
from collector.store import Store, open_store, record_row
from protocols.records import Record, ms_to_ts, ts_to_ms
from simulators.fleet import registry as fleet_registry
from simulators.fleet import vehicle_ids
from simulators.scenario import shipped
from simulators.scenario.load import load
from simulators.scenario.render import render
from tests.services import PROJECT

HOUR = 3_600_000
SCENARIOS = sorted(p.stem for p in shipped())


def _scenario(name: str) -> tuple[list[Record], Path]:
    recs, registry = _rendered(name)
    return [dict(r) for r in recs], registry


@functools.cache
def _rendered(name: str) -> tuple[list[Record], Path]:
    """The scenario rendered once for both dialects' runs (seconds a scenario)."""
    path = next(p for p in shipped() if p.stem == name)
    recs = render(path)
    numbered: dict[str, int] = {}
    out = []
    for rec in recs:
        numbered[rec["vehicle"]] = numbered.get(rec["vehicle"], 0) + 1
        out.append({**rec, "agent": f"pi-{rec['vehicle']}", "seq": numbered[rec["vehicle"]]})
    return out, Path(load(path).registry_path)


#: ``frota check``'s findings by (records, registry, as_of): the SQLite and PostgreSQL runs of a
#: test give it the same records, so each answer is computed once (~8 s a process).
_CHECKED: dict[tuple[bytes, bytes, int], list[dict[str, Any]]] = {}


def _frota_check(records: list[Record], registry: Path, as_of_ms: int,
                 tmp_path: Path) -> list[dict[str, Any]]:
    """``frota check --as-of`` on the records (a real process)."""
    text = b"".join(orjson.dumps(r) + b"\n" for r in records)
    key = (hashlib.sha256(text).digest(), registry.read_bytes(), as_of_ms)
    if key not in _CHECKED:
        file = tmp_path / "records.jsonl"
        file.write_bytes(text)
        done = subprocess.run([sys.executable, "-m", "frota", "check", "--registry",
                               str(registry), "--as-of", ms_to_ts(as_of_ms), str(file)],
                              cwd=PROJECT, capture_output=True, text=True, timeout=300,
                              check=False)
        assert done.returncode == 0, done.stderr
        _CHECKED[key] = [json.loads(line) for line in done.stdout.splitlines()]
    return copy.deepcopy(_CHECKED[key])


def _live(store: Store, registry: Path) -> LiveRules:
    return LiveRules(store, fleet.load(registry), registry.read_bytes(), load_profiles())


@pytest.mark.parametrize("name", SCENARIOS)
def test_live_findings_equal_frota_check_in_bursts_late_backlog_and_restart(
        name: str, store_url: str, tmp_path: Path) -> None:
    recs, registry = _scenario(name)
    recs.sort(key=lambda r: (ts_to_ms(r["ts"]), r["vehicle"], r["seq"]))
    times = [ts_to_ms(r["ts"]) for r in recs]   # parsed once: ~100k records
    first, last = times[0], times[-1]
    # six bursts in time order, but the second one (a backlog hours old) delivered last, after a
    # restart
    cuts = [first + (last - first) * k // 6 for k in range(7)]
    bursts = [[r for r, ms in zip(recs, times, strict=True) if cuts[k] <= ms < cuts[k + 1]
               or (k == 5 and ms == last)] for k in range(6)]
    backlog = bursts.pop(1)
    assert backlog, "the scenario is too short to have a backlog"
    store = open_store(store_url)
    live = _live(store, registry)
    delivered: list[Record] = []
    as_of = first
    try:
        for burst in bursts:
            store.put([record_row(r, 0) for r in burst])
            delivered += burst
            as_of = max([as_of, *(ts_to_ms(r["ts"]) for r in burst)])
            live.evaluate(as_of, as_of)
        mid = findings.load(store)
        assert mid == (_frota_check(delivered, registry, as_of, tmp_path), as_of)
    finally:
        store.close()

    # the collector restarts; the backlog arrives
    store = open_store(store_url)
    try:
        live = _live(store, registry)
        store.put([record_row(r, 0) for r in backlog])
        as_of = last + HOUR
        done = live.evaluate(as_of, as_of)
        start = done.boundaries[FLEET]
        # replayed from the checkpoint before the backlog, not from the beginning of time
        assert start is not None
        assert first < start <= ts_to_ms(backlog[0]["ts"])
        assert done.replayed[FLEET] < len(recs)
        assert findings.load(store) == (_frota_check(recs, registry, as_of, tmp_path), as_of)
        # nothing new: the state kept in memory has processed every record (all are settled,
        # an hour before as_of), so nothing is fed again; the clock moves the open findings
        later = live.evaluate(as_of + HOUR, as_of + HOUR)
        assert later.replayed[FLEET] == 0
        assert findings.load(store) == (_frota_check(recs, registry, as_of + HOUR, tmp_path),
                                        as_of + HOUR)
    finally:
        store.close()


def test_a_new_registry_replays_the_store_once_and_a_damaged_checkpoint_is_dropped(
        tmp_path: Path) -> None:
    recs, registry = _scenario("sp-breakdown")
    store = open_store(str(tmp_path / "c.db"))
    try:
        store.put([record_row(r, 0) for r in recs])
        as_of = max(ts_to_ms(r["ts"]) for r in recs) + HOUR
        _live(store, registry).evaluate(as_of, as_of)
        expected = findings.load(store)
        # a damaged tail checkpoint: dropped, the partition replayed from an earlier one
        store.apply([("UPDATE live_checkpoints SET state = ? WHERE tail = 1", [(b"junk",)])])
        with pytest.raises(CheckpointError):
            restore(b"junk", fleet.load(registry), load_profiles())
        done = _live(store, registry).evaluate(as_of, as_of)
        assert done.replayed[FLEET] > 0
        assert findings.load(store) == expected
        # the same registry with other bytes (a new registry): everything replayed once
        edited = tmp_path / "fleet.json"
        edited.write_text(registry.read_text(encoding="utf-8") + "\n", encoding="utf-8")
        done = _live(store, edited).evaluate(as_of, as_of)
        assert done.boundaries[FLEET] is None
        assert done.replayed[FLEET] == len(recs)
        assert findings.load(store) == expected
        assert store_live.state(store, store_live.last_id_name(FLEET)) == store.newest_record_id()
    finally:
        store.close()


AZUL, VERDE = "Viação Azul", "Expresso Verde"
CLEAN_TRIP, LATER_TRIP = "T1001-0302-0900", "T1001-0302-1230"


def _two_operators(tmp_path: Path, later_operator: str) -> tuple[list[Record], Path]:
    """sp-clean on FRT1A01 (Viação Azul), the same trip and driver D-1001 three and a half hours
    later on FRT1A02 (``later_operator``), sp-breakdown on FRT2B02 (Expresso Verde)."""
    data = next(iter(shipped())).parent
    clean = json.loads((data / "sp-clean.registry.json").read_text(encoding="utf-8"))
    broken = json.loads((data / "sp-breakdown.registry.json").read_text(encoding="utf-8"))
    vehicles = [dict(clean["vehicles"][0], operator=AZUL),
                dict(clean["vehicles"][0], id="FRT1A02", operator=later_operator),
                *(dict(v, operator=VERDE) for v in broken["vehicles"])]
    registry = tmp_path / "fleet.json"
    registry.write_text(json.dumps({"lines": clean["lines"] + broken["lines"],
                                    "vehicles": vehicles,
                                    "drivers": clean["drivers"] + broken["drivers"]}),
                        encoding="utf-8")
    later = (data / "sp-clean.toml").read_text(encoding="utf-8")
    for old, new in (('vehicle = "FRT1A01"', 'vehicle = "FRT1A02"'),
                     ("start = 2026-03-02T11:30:00Z", "start = 2026-03-02T15:00:00Z"),
                     ("2026-03-02T12:00:00Z", "2026-03-02T15:30:00Z"),
                     (CLEAN_TRIP, LATER_TRIP),
                     ('registry = "sp-clean.registry.json"', f'registry = "{registry}"')):
        assert old in later, old
        later = later.replace(old, new)
    (tmp_path / "later.toml").write_text(later, encoding="utf-8")
    out: list[Record] = []
    for path in (data / "sp-clean.toml", tmp_path / "later.toml", data / "sp-breakdown.toml"):
        out += [{**rec, "agent": f"pi-{rec['vehicle']}", "seq": n}
                for n, rec in enumerate(render(path), start=1)]
    return out, registry


@pytest.mark.parametrize("later_operator", [AZUL, VERDE])
def test_operators_are_partitions_judged_apart_and_live_equals_frota_check(
        later_operator: str, store_url: str, tmp_path: Path) -> None:
    """Each operator is a partition; a driver who drives for two operators is judged by each
    apart: what the collector finds is what ``frota check`` finds on each operator's records
    alone (docs/rules.md, "Operators")."""
    recs, registry = _two_operators(tmp_path, later_operator)
    recs.sort(key=lambda r: (ts_to_ms(r["ts"]), r["vehicle"], r["seq"]))
    as_of = ts_to_ms(recs[-1]["ts"]) + HOUR
    operator = {"FRT1A01": AZUL, "FRT1A02": later_operator, "FRT2B02": VERDE}
    store = open_store(store_url)
    try:
        live = _live(store, registry)
        for k in range(4):                      # four bursts, the last one first
            burst = recs[(3 - k) * len(recs) // 4:(4 - k) * len(recs) // 4]
            store.put([record_row(r, 0) for r in burst])
            done = live.evaluate(as_of, as_of)
        assert set(done.replayed) <= {f"operator:{AZUL}", f"operator:{VERDE}"}
        got = findings.load(store)
        parts = dict(store._read("SELECT id, part FROM findings"))
    finally:
        store.close()
    assert got == (_frota_check(recs, registry, as_of, tmp_path), as_of)
    alone: list[dict[str, Any]] = []
    for name in (AZUL, VERDE):
        mine = [r for r in recs if operator[r["vehicle"]] == name]
        folder = tmp_path / name.split()[-1]
        folder.mkdir()
        alone += _frota_check(mine, registry, as_of, folder)
    assert sorted(f["id"] for f in got[0]) == sorted(f["id"] for f in alone)
    assert {f["id"]: f for f in got[0]} == {f["id"]: f for f in alone}
    for found in got[0]:                        # each finding in its vehicle's operator's
        if found["vehicle"] is not None:
            assert parts[found["id"]] == f"operator:{operator[found['vehicle']]}"


def test_a_steady_stream_of_skewed_batches_replays_a_bounded_window(tmp_path: Path) -> None:
    """Buses send their batches out of step: at each evaluation some buses' records of the last
    second are still on their way. Each evaluation replays from the settled tail (the delay of
    what arrives, never more: the replay's start does not run away from ``as_of``), and the live
    findings equal ``frota check --as-of`` at the end."""
    buses, seconds = 12, 90
    vehicles = vehicle_ids(buses)
    registry = tmp_path / "fleet.json"
    registry.write_text(json.dumps(fleet_registry(buses)), encoding="utf-8")
    start = 1_780_000_000_000
    # bus i records at start + k s + 80·i ms; the odd buses' batch of second k reaches the
    # store one evaluation later than the even buses' (at most 2 s after its first record)
    recs = {v: [{"vehicle": v, "ts": ms_to_ts(start + k * 1000 + 80 * i), "agent": f"pi-{v}",
                 "seq": k + 1, **({"kind": "speed", "kmh": 40.0 + k % 50} if k % 2 else
                                  {"kind": "position", "lat": -23.5, "lon": -46.6, "kmh": 60.0})}
                for k in range(seconds)] for i, v in enumerate(vehicles)}
    # Evaluation k runs at as_of = start + k s + 999 ms; the earliest record arriving then is bus
    # 1's of second k - 1, at 80 ms: 919 ms before the previous evaluation's as_of. The tail goes
    # at as_of - 919 ms, and the next evaluation, one second later, starts from it: 1,919 ms
    # before its as_of.
    store = open_store(str(tmp_path / "c.db"))
    delivered: list[Record] = []
    try:
        live = _live(store, registry)
        for k in range(seconds + 1):
            arriving = [recs[v][k - i % 2] for i, v in enumerate(vehicles)
                        if 0 <= k - i % 2 < seconds]
            store.put([record_row(r, 0) for r in arriving])
            delivered += arriving
            as_of = start + k * 1000 + 999
            done = live.evaluate(as_of, as_of)
            boundary = done.boundaries.get(FLEET)
            if k >= 3:
                assert boundary == as_of - 1919
                assert done.replayed[FLEET] == sum(1 for r in delivered
                                                   if ts_to_ms(r["ts"]) >= boundary)
            # the records after the settled boundary (5 of the 12 buses': even buses from the
            # second) are judged on a fork of the settled engine (collector/live_state.py):
            # judged along the way too, the settled engine going on from it each time
            if k in (30, 60):
                assert findings.load(store) == (
                    _frota_check(delivered, registry, as_of, tmp_path), as_of)
        assert findings.load(store) == (_frota_check(delivered, registry, as_of, tmp_path), as_of)
    finally:
        store.close()


def test_a_fork_leaves_the_engine_as_it_was_and_judges_as_a_full_copy(tmp_path: Path) -> None:
    """``live_state.fork``: a few vehicles' speed and position records judged on a fork (their
    own state copied, the other vehicles' shared with the engine) change nothing of the engine
    it was made from, and give the findings a full copy gives."""
    vehicles = vehicle_ids(6)
    registry = tmp_path / "fleet.json"
    registry.write_text(json.dumps(fleet_registry(6)), encoding="utf-8")
    reg, profiles = fleet.load(registry), load_profiles()
    start = 1_780_000_000_000

    def second(k: int, v: str, i: int) -> Record:   # over the 90 km/h limit now and then
        return {"vehicle": v, "ts": ms_to_ts(start + k * 1000 + 100 * i), "agent": f"pi-{v}",
                "seq": k + 1, **({"kind": "speed", "kmh": 95.0 if k % 40 > 25 else 50.0}
                                 if k % 2 else {"kind": "position", "lat": -23.5, "lon": -46.6,
                                                "kmh": 50.0 + i})}

    engine = LiveEngine(reg, profiles)
    for k in range(150):
        for i, v in enumerate(vehicles):
            engine.add_one(start + k * 1000 + 100 * i, second(k, v, i))
    engine.flush(final=True)
    before = snapshot(engine)
    own = vehicles[:2]
    forked = fork(engine, own, profiles)
    full = restore(before, reg, profiles)
    for judge in (forked, full):
        for k in range(150, 200):
            for i, v in enumerate(own):
                judge.add_one(start + k * 1000 + 100 * i, second(k, v, i))
    as_of = start + 200_000
    assert forked.findings(as_of) == full.findings(as_of)
    assert any(f["rule"] == "speed.over_limit" for f in full.findings(as_of))
    assert snapshot(engine) == before
