"""Review of the live rules fed in place (collector/live_rules.py: the settled engine kept in
memory and fed in place, the head judged on a copy, open findings judged without copying, the
findings' JSON compared): adversarial deliveries, each compared with what ``frota check --as-of``
finds on the same records (the command's own function, frota/commands/check.py, run on the
records written as JSON Lines) — on SQLite and on PostgreSQL.

- many small evaluations, some with nothing new (the clock moves: open findings judged on the
  engine kept in memory, which goes on being fed afterwards);
- records with the same ``ts`` on several buses, delivered apart, some exactly at ``as_of`` (at
  the settled boundary) and after it;
- an evaluation that fails half-way (an exception while feeding, or while writing): the next one
  equals ``frota check``;
- two evaluators on one store taking turns (another collector evaluated meanwhile, a restart).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from collector import findings, live_rules, live_state, store_live
from collector import registry as fleet
from collector.live_leases import Leases
from collector.live_rules import LiveRules
from collector.live_state import LiveEngine, snapshot
from collector.partitions import partition_names
from collector.rules.profile import load_profiles
from collector.store import Store, open_store, record_row
from frota.commands.check import check
from protocols.records import Record, ms_to_ts, ts_to_ms
from simulators.fleet import registry as fleet_registry
from simulators.fleet import vehicle_ids
from simulators.scenario import shipped
from tests.collector.test_live_rules import SCENARIOS, _scenario

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

#: the rules only the whole store judges (docs/collector.md "Live findings")
STORE_ONLY = {"retention.minimum", "equipment.integrity"}


def _check(records: list[Record], registry: Path, as_of_ms: int,
           folder: Path) -> list[dict[str, Any]]:
    """``frota check --as-of`` on the records (its function, on a JSON Lines file), as JSON."""
    file = folder / "records.jsonl"
    file.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return [json.loads(orjson.dumps(f)) for f in check(str(registry), "SP", file,
                                                         ms_to_ts(as_of_ms))]


def _live_findings(store: Store) -> tuple[list[dict[str, Any]], int | None]:
    found, as_of = findings.load(store)
    return [f for f in found if f["rule"] not in STORE_ONLY], as_of


@contextmanager
def _two_holders(url: str, registry: Path) -> Iterator[tuple[
        dict[str, Store], dict[str, Leases], dict[str, LiveRules], list[str]]]:
    """Two collectors, ``a`` and ``b``, on one PostgreSQL store, each with its evaluation
    leases and live rules; the fleet's partitions. The stores are closed on the way out."""
    stores = {"a": open_store(url), "b": open_store(url)}
    try:
        leases = {who: Leases(s, who) for who, s in stores.items()}
        lives = {who: LiveRules(s, fleet.load(registry), registry.read_bytes(),
                                load_profiles(), leases=leases[who])
                 for who, s in stores.items()}
        yield stores, leases, lives, partition_names(lives["a"].registry)
    finally:
        for s in stores.values():
            s.close()


def _stall(store: Store, who: str) -> None:
    """``who`` stalled: its leases run out and it is no longer counted a member."""
    store.apply([("UPDATE live_leases SET until_ms = 0 WHERE holder = ?", [(who,)]),
                 ("DELETE FROM live_members WHERE holder = ?", [(who,)])])


def _live(store: Store, registry: Path) -> LiveRules:
    return LiveRules(store, fleet.load(registry), registry.read_bytes(), load_profiles())


def _same(store: Store, delivered: list[Record], registry: Path, as_of: int,
          folder: Path) -> None:
    got, at = _live_findings(store)
    assert at == as_of
    want = _check(delivered, registry, as_of, folder)
    assert {f["id"]: f for f in got} == {f["id"]: f for f in want}
    assert got == want


def _sorted(recs: list[Record]) -> list[Record]:
    return sorted(recs, key=lambda r: (ts_to_ms(r["ts"]), r["vehicle"], r["seq"]))


# SQLite only, like the boundary test below: the evaluator's paths (test_live_rules.py runs the
# scenarios on both backends)
@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("name", SCENARIOS)
def test_many_small_evaluations_and_the_clock_alone(name: str, store_url: str,
                                                    tmp_path: Path) -> None:
    """Bursts of 7 minutes of device time, each evaluated at its last record (the head judged
    on a copy), then once more 20 minutes later with nothing new (every record settled: the
    open findings judged on the engine kept in memory, which the next burst feeds in place).
    Equal to ``frota check --as-of`` after each."""
    recs, registry = _scenario(name)
    recs = _sorted(recs)
    times = [ts_to_ms(r["ts"]) for r in recs]
    first, last = times[0], times[-1]
    store = open_store(store_url)
    delivered: list[Record] = []
    try:
        live = _live(store, registry)
        at = 0
        cut = first
        step = 0
        while at < len(recs):
            cut += 7 * MINUTE
            burst = []
            while at < len(recs) and times[at] < cut:
                burst.append(recs[at])
                at += 1
            store.put([record_row(r, 0) for r in burst])
            delivered += burst
            as_of = times[at - 1]
            live.evaluate(as_of, as_of)
            if step % 4 == 0 or at == len(recs):
                _same(store, delivered, registry, as_of, tmp_path)
            quiet = as_of + 20 * MINUTE     # nothing new: the clock alone
            if at < len(recs):
                quiet = min(quiet, times[at] - 1)
            if quiet > as_of:
                live.evaluate(quiet, quiet)
                if step % 4 == 1:
                    _same(store, delivered, registry, quiet, tmp_path)
            step += 1
        live.evaluate(last + 2 * HOUR, last + 2 * HOUR)
        _same(store, delivered, registry, last + 2 * HOUR, tmp_path)
    finally:
        store.close()


def _same_ms_fleet(tmp_path: Path, buses: int, seconds: int) -> tuple[list[Record], Path,
                                                                     list[str]]:
    """``buses`` buses recording on the same milliseconds: every second a speed record, every
    fifth a position, all buses at the same ``ts``; speeds crossing the limit so that speeding
    episodes open and close."""
    vehicles = vehicle_ids(buses)
    registry = tmp_path / "fleet.json"
    registry.write_text(json.dumps(fleet_registry(buses)), encoding="utf-8")
    start = 1_780_000_000_000
    recs: list[Record] = []
    for i, v in enumerate(vehicles):
        for k in range(seconds):
            ms = start + k * SECOND
            kmh = 95.0 if (k // 20 + i) % 3 == 0 else 40.0 + k % 7
            rec: Record = ({"kind": "position", "lat": -23.5 + k * 1e-5, "lon": -46.6,
                            "kmh": kmh} if k % 5 == 0 else {"kind": "speed", "kmh": kmh})
            recs.append({"vehicle": v, "ts": ms_to_ts(ms), "agent": f"pi-{v}", "seq": k + 1,
                         **rec})
    return recs, registry, vehicles


def test_same_ts_on_several_buses_delivered_apart_around_the_boundary(
        store_url: str, tmp_path: Path) -> None:
    """Every bus records on the same milliseconds; each evaluation runs at ``as_of`` equal to
    a record's ``ts`` (records at ``as_of`` are judged, those after it not yet), and a bus's
    records of that very millisecond — or of the milliseconds before — reach the store only at
    the next evaluation (ts at the settled boundary, the same ts with another seq on both sides
    of it). Equal to ``frota check --as-of`` at every evaluation."""
    recs, registry, vehicles = _same_ms_fleet(tmp_path, 4, 150)
    rng = random.Random(16)
    pending = _sorted(recs)
    start = ts_to_ms(pending[0]["ts"])
    store = open_store(store_url)
    delivered: list[Record] = []
    try:
        live = _live(store, registry)
        k = 0
        while pending:
            as_of = start + k * 3 * SECOND + rng.choice((0, 0, 1, 999))
            late = rng.choice(vehicles)     # its records up to as_of wait one evaluation
            lag = rng.choice((0, SECOND, 2 * SECOND))
            now = [r for r in pending if ts_to_ms(r["ts"]) <= as_of
                   and (r["vehicle"] != late or ts_to_ms(r["ts"]) < as_of - lag)]
            ahead = [r for r in pending if ts_to_ms(r["ts"]) > as_of][:rng.choice((0, 1))]
            arriving = now + ahead           # one record ahead of as_of (a clock ahead) too
            rng.shuffle(arriving)
            taken = {id(r) for r in arriving}
            pending = [r for r in pending if id(r) not in taken]
            store.put([record_row(r, 0) for r in arriving])
            delivered += arriving
            live.evaluate(as_of, as_of)
            _same(store, [r for r in delivered if ts_to_ms(r["ts"]) <= as_of], registry,
                  as_of, tmp_path)
            k += 1
        as_of = max(ts_to_ms(r["ts"]) for r in recs) + MINUTE
        live.evaluate(as_of, as_of)
        _same(store, delivered, registry, as_of, tmp_path)
    finally:
        store.close()


class InjectedError(Exception):
    """The failure injected into an evaluation."""


def _failing_once(real: Callable[..., Any], after: int) -> Callable[..., Any]:
    """``real``, raising :class:`InjectedError` at its ``after``-th call (once)."""
    calls = [0]

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == after:
            raise InjectedError(f"call {after}")
        return real(*args, **kwargs)

    return wrapped


@pytest.mark.parametrize("where", ["feed", "write", "snapshot"])
def test_an_evaluation_failing_half_way_leaves_no_state_advanced(
        where: str, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation fails half-way — the engine kept in memory has been fed some of the new
    records (an exception while feeding), or all of them but the store's transaction did not
    happen (while writing the findings), or while saving a state. The store's checkpoint and
    row id judged did not move; the next evaluation, given more records, must not start from
    the state advanced in memory: equal to ``frota check --as-of``."""
    recs, registry = _scenario("sp-breakdown")
    recs = _sorted(recs)
    times = [ts_to_ms(r["ts"]) for r in recs]
    cuts = [times[0] + (times[-1] - times[0]) * k // 8 for k in range(9)]
    bursts = [[r for r, ms in zip(recs, times, strict=True)
               if cuts[k] <= ms < cuts[k + 1] or (k == 7 and ms == times[-1])]
              for k in range(8)]
    store = open_store(store_url)
    delivered: list[Record] = []
    try:
        live = _live(store, registry)
        for k, burst in enumerate(bursts):
            store.put([record_row(r, 0) for r in burst])
            delivered += burst
            as_of = max(ts_to_ms(r["ts"]) for r in burst)
            if k == 4:      # this evaluation fails half-way
                with monkeypatch.context() as patch:
                    if where == "feed":
                        patch.setattr(LiveEngine, "add_one", _failing_once(
                            LiveEngine.add_one, len(burst) // 2))
                    elif where == "write":
                        patch.setattr(store_live, "write", _failing_once(store_live.write, 1))
                    else:
                        patch.setattr(live_rules, "snapshot",
                                      _failing_once(snapshot, 1))
                    with pytest.raises(InjectedError):
                        live.evaluate(as_of, as_of)
                continue
            live.evaluate(as_of, as_of)
            _same(store, delivered, registry, as_of, tmp_path)
        live.evaluate(as_of + HOUR, as_of + HOUR)
        _same(store, delivered, registry, as_of + HOUR, tmp_path)
    finally:
        store.close()


def _bursts(recs: list[Record], times: list[int], n: int) -> tuple[list[int], list[list[Record]]]:
    """``recs`` (in time order, ``times`` their ms) cut into ``n`` bursts of equal device time:
    the n + 1 cuts and the records of each (the last record in the last burst)."""
    first, last = times[0], times[-1]
    cuts = [first + (last - first) * k // n for k in range(n + 1)]
    bursts = [[r for r, ms in zip(recs, times, strict=True)
               if cuts[k] <= ms < cuts[k + 1] or (k == n - 1 and ms == last)] for k in range(n)]
    return cuts, bursts

def test_two_evaluators_taking_turns_on_one_store(store_url: str, tmp_path: Path) -> None:
    """Two collectors on one store evaluate in turn (a takeover, then back: the first one's
    state kept in memory is stale — the other judged the partition meanwhile), a late backlog
    arriving at one of them; a turn may bring nothing new (the clock alone). Equal to ``frota
    check --as-of`` after every turn."""
    recs, registry = _scenario("ba-night")
    recs = _sorted(recs)
    times = [ts_to_ms(r["ts"]) for r in recs]
    first = times[0]
    _, bursts = _bursts(recs, times, 10)
    backlog = bursts.pop(2)
    stores = {0: open_store(store_url), 1: open_store(store_url)}   # two collectors
    delivered: list[Record] = []
    try:
        lives = [_live(stores[0], registry), _live(stores[1], registry)]
        order = [0, 0, 1, 1, 0, 0, 1, 0, 1]      # whose turn for each burst
        as_of = first
        for k, burst in enumerate(bursts):
            if k == 6:
                burst = backlog + burst        # a backlog hours old arrives
            who = order[k]
            stores[who].put([record_row(r, 0) for r in burst])
            delivered += burst
            as_of = max([as_of, *(ts_to_ms(r["ts"]) for r in burst)])
            lives[who].evaluate(as_of, as_of)
            _same(stores[who], delivered, registry, as_of, tmp_path)
            other = 1 - who                      # the other one: nothing new, the clock moved
            lives[other].evaluate(as_of + MINUTE, as_of + MINUTE)
            _same(stores[other], delivered, registry, as_of + MINUTE, tmp_path)
            as_of += MINUTE
    finally:
        for s in stores.values():
            s.close()


@pytest.mark.parametrize("name", SCENARIOS)
def test_judging_open_findings_leaves_the_state_as_it_was(name: str) -> None:
    """The engine kept in memory is asked for its findings at ``as_of`` (open episodes, open
    deadlines, the running driver segments) and then fed on: asking must change nothing. Its
    saved state (collector/live_state.py: vehicles, drivers, trips, every rule's own state) is
    the same bytes before and after, at every 10 minutes of each scenario and hours after its
    last record; and an engine asked all along ends with the findings of one never asked."""
    recs, registry_path = _scenario(name)
    recs = _sorted(recs)
    registry = fleet.load(registry_path)
    profiles = load_profiles()
    asked, quiet = LiveEngine(registry, profiles), LiveEngine(registry, profiles)
    times = [ts_to_ms(r["ts"]) for r in recs]
    cut = times[0]
    at = 0
    checked = 0
    while at < len(recs):
        cut += 10 * MINUTE
        while at < len(recs) and times[at] < cut:
            asked.add_one(times[at], recs[at])
            quiet.add_one(times[at], recs[at])
            at += 1
        asked.flush(final=True)
        for later in (0, 1, 9 * MINUTE, 3 * HOUR):
            before = snapshot(asked)
            asked.findings(times[at - 1] + later)
            assert snapshot(asked) == before, (times[at - 1], later)
            checked += 1
    assert checked > 10
    end = times[-1] + 3 * HOUR
    assert orjson.dumps(asked.findings(end)) == orjson.dumps(quiet.findings(end))


# SQLite only: the boundary is the evaluator's (the other tests here run both backends through
# the same resumption paths), and each round compares with frota check over all delivered so
# far — 50 s a backend.
@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_records_exactly_at_the_settled_boundary_and_just_before_it(
        store_url: str, tmp_path: Path) -> None:
    """After each evaluation the settled boundary ``b`` of the engine kept in memory is read;
    the next delivery brings records at exactly ``b`` (on a bus whose records after ``b`` are
    already stored, and on another one: the same ``ts``, other ``seq``: the engine kept in
    memory goes on from ``b``), or, every other round, at ``b - 1`` (just before it: replayed
    from a saved state). A driver moves between the two buses of one operator (docs/rules.md,
    "Operators"). Equal to ``frota check --as-of`` after each."""
    from tests.collector.test_live_rules import AZUL, _two_operators

    recs, registry = _two_operators(tmp_path, AZUL)
    recs = _sorted(recs)
    last = ts_to_ms(recs[-1]["ts"])
    seqs: dict[str, int] = {}
    store = open_store(store_url)
    delivered: list[Record] = []
    resumed = {"at b": 0, "before b": 0}
    try:
        live = _live(store, registry)
        pending = list(recs)
        as_of = ts_to_ms(recs[0]["ts"]) + 10 * MINUTE
        rounds = 0
        while pending or rounds < 2:
            held = {r["vehicle"] for r in pending[:1]}      # one bus a little late
            now = [r for r in pending if ts_to_ms(r["ts"]) <= as_of and not (
                r["vehicle"] in held and ts_to_ms(r["ts"]) > as_of - 40 * SECOND)]
            taken = {id(r) for r in now}
            pending = [r for r in pending if id(r) not in taken]
            extra: list[Record] = []
            wanted: dict[str, int] = {}
            for part, kept in live.kept.items():
                b = kept.boundary
                ms = b if rounds % 2 == 0 else b - 1
                wanted[part] = ms
                for vehicle in sorted({item[1] for item in kept.items})[:2] or ["FRT1A01"]:
                    seqs[vehicle] = seqs.get(vehicle, 0) + 1
                    extra.append({"vehicle": vehicle, "kind": "speed", "kmh": 0.0,
                                  "ts": ms_to_ts(ms), "agent": f"extra-{vehicle}",
                                  "seq": seqs[vehicle]})
            arriving = now + extra
            store.put([record_row(r, 0) for r in arriving])
            delivered += arriving
            done = live.evaluate(as_of, as_of)
            for part, ms in wanted.items():
                start = done.boundaries.get(part)
                if start == ms:
                    resumed["at b" if rounds % 2 == 0 else "before b"] += 1
            _same(store, delivered, registry, as_of, tmp_path)
            # 30 minutes a round: frota check over every record delivered (the reference) is
            # most of this test's time, and each round runs it once
            as_of += 30 * MINUTE if as_of < last else HOUR
            rounds += 1
            if not pending:
                break
        live.evaluate(as_of, as_of)
        _same(store, delivered, registry, as_of, tmp_path)
    finally:
        store.close()
    assert resumed["at b"] > 3


def _one_fleet(tmp_path: Path, clone_ms: int = 0) -> tuple[list[Record], Path]:
    """The three shipped scenarios on one partition (no operator), started together, each bus
    at its own offset within the second, and sp-clean once more on FRT1A09 (its trips renamed)
    with the same driver, D-1001, ``clone_ms`` later (standing still for 3 s before): four
    buses, a driver present on two of them at once."""
    data = next(iter(shipped())).parent
    docs = {name: json.loads((data / f"{name}.registry.json").read_text(encoding="utf-8"))
            for name in SCENARIOS}
    clone = dict(docs["sp-clean"]["vehicles"][0], id="FRT1A09")
    registry = tmp_path / "fleet.json"
    registry.write_text(json.dumps({
        "lines": [x for d in docs.values() for x in d["lines"]],
        "vehicles": [x for d in docs.values() for x in d["vehicles"]] + [clone],
        "drivers": [x for d in docs.values() for x in d["drivers"]]}), encoding="utf-8")
    out: list[Record] = []
    t0 = 1_780_000_000_000
    for k, name in enumerate([*SCENARIOS, "sp-clean"]):
        recs, _ = _scenario(name)
        shift = t0 + 137 * k - min(ts_to_ms(r["ts"]) for r in recs) + (
            clone_ms if k == len(SCENARIOS) else 0)
        for rec in recs:
            moved = {**rec, "ts": ms_to_ts(ts_to_ms(rec["ts"]) + shift)}
            if isinstance(rec.get("scheduled"), str):
                moved["scheduled"] = ms_to_ts(ts_to_ms(rec["scheduled"]) + shift)
            if k == len(SCENARIOS):
                moved["vehicle"] = "FRT1A09"
                moved["agent"] = "pi-FRT1A09"
                if "trip" in moved:
                    moved["trip"] = f"{moved['trip']}-bis"
            out.append(moved)
        if k == len(SCENARIOS):     # standing still for 3 s before its first records
            start = min(ts_to_ms(r["ts"]) for r in recs) + shift
            out += [{"vehicle": "FRT1A09", "ts": ms_to_ts(start - n * SECOND), "kind": "speed",
                     "kmh": 0.0, "agent": "gps-FRT1A09", "seq": 4 - n} for n in (3, 2, 1)]
    return _sorted(out), registry


#: FRT1A09's first record 10 s into the fourth window of dense evaluations (95:06.66 after the
#: first record), less its offset within the second
LATE_CLONE_MS = 95 * MINUTE + 16_660 - 3 * 137


# One backend per clone time (the fork is the evaluator's, not the store's; both backends run
# it): the four combinations cost 90 s of the suite's 15 minutes.
@pytest.mark.parametrize(("clone_ms", "store_url"), [
    (0, "sqlite"), pytest.param(LATE_CLONE_MS, "postgres", marks=pytest.mark.postgres),
], indirect=["store_url"])
def test_heads_of_a_few_buses_judged_on_a_fork(clone_ms: int, store_url: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Four buses on one partition, each at its own offset within the second; in windows of
    dense evaluations one bus (a different one each time) is prompt and the others' records of
    the last 800 ms still on their way, so that the head (after the settled boundary) holds
    one bus's speed and position records: judged on a fork (collector/live_state.py, ``fork``:
    its state copied, the other buses' shared with the engine kept in memory). The fork must
    neither change the kept engine nor judge otherwise than a whole copy: equal to ``frota
    check --as-of`` after each window and at the end. With ``clone_ms``, FRT1A09 comes later,
    its first records judged on a fork: a bus not yet known to the engine it forks."""
    recs, registry = _one_fleet(tmp_path, clone_ms)
    forks = [0, 0]          # forks, forks for a bus the engine does not know yet
    real_fork = live_state.fork

    def counted(engine: LiveEngine, own: set[str], *args: Any) -> Any:
        forks[0] += 1
        forks[1] += any(v not in engine.vehicles for v in own)
        return real_fork(engine, own, *args)

    monkeypatch.setattr(live_rules, "fork", counted)
    buses = sorted({r["vehicle"] for r in recs})
    times = [ts_to_ms(r["ts"]) for r in recs]
    first, last = times[0], times[-1]
    store = open_store(store_url)
    delivered: list[Record] = []
    pending = list(range(len(recs)))
    seen: set[str] = set()

    def deliver(until: int, prompt: str | None = None, lag: int = 0) -> None:
        nonlocal pending
        now = [i for i in pending if times[i] <= until - (0 if recs[i]["vehicle"] == prompt
                                                           else lag)]
        if not now:
            return
        taken = set(now)
        pending = [i for i in pending if i not in taken]
        store.put([record_row(recs[i], 0) for i in now])
        delivered.extend(recs[i] for i in now)
        seen.update(recs[i]["vehicle"] for i in now)

    try:
        live = _live(store, registry)
        as_of = first + 5 * MINUTE
        window = 0
        while as_of < last:
            deliver(as_of)
            live.evaluate(as_of, as_of)
            for k in range(60):        # a dense window: every 1,000 + 37 ms
                as_of += SECOND + 37
                # the prompt bus: one not seen yet as soon as it has records, else in turn
                prompt = next((recs[i]["vehicle"] for i in pending if times[i] <= as_of
                               and recs[i]["vehicle"] not in seen),
                              buses[(window + k // 20) % len(buses)])
                deliver(as_of, prompt, 800)
                live.evaluate(as_of, as_of)
            _same(store, delivered, registry, as_of, tmp_path)
            window += 1
            as_of += (23 if window % 2 else 41) * MINUTE
        deliver(last)
        live.evaluate(last + HOUR, last + HOUR)
        _same(store, delivered, registry, last + HOUR, tmp_path)
    finally:
        store.close()
    assert forks[0] > 50
    assert forks[1] > 0 or not clone_ms


def test_a_lease_lost_mid_replay_and_taken_over(postgres_dsn: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Two collectors on PostgreSQL with evaluation leases (collector/live_leases.py). A holds
    the partition and keeps its engine in memory; its lease runs out (it stalled) and B takes
    the partition over and judges a burst. A, not knowing, evaluates the next burst: its write
    is refused — once while writing, once in the middle of its replay (a lease renewed every
    4,096 records). B stalls in turn, A takes the partition back with a late backlog: equal to
    ``frota check --as-of`` after every evaluation that was written, and nothing written by the
    one that lost its lease."""
    from collector.live_leases import LeaseLostError
    from frota.harness.postgres import private_schema

    recs, registry = _scenario("ba-night")
    recs = _sorted(recs)
    times = [ts_to_ms(r["ts"]) for r in recs]
    first = times[0]
    _, bursts = _bursts(recs, times, 8)
    backlog = bursts.pop(3)
    with private_schema(postgres_dsn) as (url, _), _two_holders(url, registry) as (
            stores, leases, lives, parts):
        delivered: list[Record] = []
        as_of = first

        def run(who: str, burst: list[Record], written: bool) -> None:
            nonlocal as_of
            stores[who].put([record_row(r, 0) for r in burst])
            delivered.extend(burst)
            as_of = max([as_of + 1, *(ts_to_ms(r["ts"]) for r in burst)])
            before = _live_findings(stores[who])
            lives[who].evaluate(as_of, as_of, leases[who].held)
            if written:
                _same(stores[who], delivered, registry, as_of, tmp_path)
            else:           # refused: the store as the other one left it
                assert _live_findings(stores[who]) == before

        assert leases["a"].claim(parts) == parts
        run("a", bursts[0], True)
        run("a", bursts[1], True)
        _stall(stores["a"], "a")
        assert leases["b"].claim(parts) == parts
        run("b", bursts[2], True)
        run("a", bursts[3], False)          # refused while writing
        leases["a"].ttl_ms = 1              # renewed at once in the replay: refused there
        refused: list[str] = []
        renew = leases["a"].renew

        def renewing(part: str) -> None:
            try:
                renew(part)
            except LeaseLostError:
                refused.append(part)
                raise

        monkeypatch.setattr(leases["a"], "renew", renewing)
        run("a", backlog, False)
        assert refused == parts
        leases["a"].ttl_ms = 30_000
        _stall(stores["b"], "b")
        assert leases["a"].claim(parts) == parts
        run("a", bursts[4], True)           # the backlog and burst 3 judged too
        run("b", bursts[5], False)          # B, stalled, does not know yet
        run("a", bursts[6], True)
        assert leases["b"].claim(parts) == []
        run("a", [], True)


def test_a_partition_taken_back_when_nothing_arrived_meanwhile(postgres_dsn: str,
                                                              tmp_path: Path) -> None:
    """A judges the partition (sp-breakdown up to its middle: an interruption open) and keeps
    its engine in memory; it stalls, B takes the partition over and judges it at its own clock,
    half an hour ahead of A's — no record at all arrived meanwhile, so the row id judged is
    still the one A kept; B stalls, A takes the partition back and judges it at its clock, a
    millisecond after its previous evaluation. What A finds must replace what B wrote (the
    interruption half an hour longer): equal to ``frota check --as-of`` at A's clock."""
    from frota.harness.postgres import private_schema

    recs, registry = _scenario("sp-breakdown")
    recs = _sorted(recs)[:len(recs) // 2]
    last = ts_to_ms(recs[-1]["ts"])
    with private_schema(postgres_dsn) as (url, _), _two_holders(url, registry) as (
            stores, leases, lives, parts):
        stores["a"].put([record_row(r, 0) for r in recs])
        assert leases["a"].claim(parts) == parts
        lives["a"].evaluate(last + MINUTE, last + MINUTE, leases["a"].held)
        _same(stores["a"], recs, registry, last + MINUTE, tmp_path)
        _stall(stores["a"], "a")
        assert leases["b"].claim(parts) == parts
        ahead = last + 31 * MINUTE
        lives["b"].evaluate(ahead, ahead, leases["b"].held)
        _same(stores["b"], recs, registry, ahead, tmp_path)
        _stall(stores["b"], "b")
        assert leases["a"].claim(parts) == parts
        lives["a"].evaluate(last + MINUTE + 1, last + MINUTE + 1, leases["a"].held)
        _same(stores["a"], recs, registry, last + MINUTE + 1, tmp_path)


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_backlog_days_old_and_a_new_registry_that_moves_the_partitions(
        store_url: str, tmp_path: Path) -> None:
    """Three nights of ba-night (its trips renamed each night) and two buses of sp-clean with
    D-1001 on both: the first and third nights delivered and judged, a new registry that moves
    FRT1A02 from Expresso Verde to Viação Azul (the driver's two vehicles now one partition:
    every checkpoint and finding dropped, the store judged again), then the second night — a
    backlog a day old — replayed from the checkpoint before it (the first night's last), not
    from the beginning. Equal
    to ``frota check --as-of`` under the registry in force after each step."""
    from tests.collector.test_live_rules import AZUL, VERDE, _two_operators

    (tmp_path / "verde").mkdir()
    (tmp_path / "azul").mkdir()
    clean, verde = _two_operators(tmp_path / "verde", VERDE)
    _, azul = _two_operators(tmp_path / "azul", AZUL)
    night, night_registry = _scenario("ba-night")
    day = 24 * HOUR
    nights: list[list[Record]] = []
    for k in range(3):
        moved = []
        for rec in night:
            one = {**rec, "ts": ms_to_ts(ts_to_ms(rec["ts"]) + k * day)}
            if isinstance(rec.get("scheduled"), str):
                one["scheduled"] = ms_to_ts(ts_to_ms(rec["scheduled"]) + k * day)
            if "trip" in one:
                one["trip"] = f"{one['trip']}-{k}"
            one["seq"] = rec["seq"] + k * len(night)
            moved.append(one)
        nights.append(moved)
    for path in (verde, azul):
        doc = json.loads(path.read_text(encoding="utf-8"))
        extra = json.loads(night_registry.read_text(encoding="utf-8"))
        for key in ("lines", "vehicles", "drivers"):
            doc[key] += extra[key]
        path.write_text(json.dumps(doc), encoding="utf-8")
    store = open_store(store_url)
    delivered: list[Record] = []
    try:
        live = _live(store, verde)
        for burst in (_sorted(clean + nights[0]), _sorted(nights[2])):
            store.put([record_row(r, 0) for r in burst])
            delivered += burst
            as_of = ts_to_ms(burst[-1]["ts"]) + MINUTE
            live.evaluate(as_of, as_of)
            _same(store, delivered, verde, as_of, tmp_path)
        live = _live(store, azul)              # the new registry
        done = live.evaluate(as_of, as_of)
        assert all(b is None for b in done.boundaries.values())
        _same(store, delivered, azul, as_of, tmp_path)
        backlog = _sorted(nights[1])
        store.put([record_row(r, 0) for r in backlog])
        delivered += backlog
        as_of += HOUR
        done = live.evaluate(as_of, as_of)
        start = max((b for b in done.boundaries.values() if b is not None), default=None)
        assert start is not None
        # from the last checkpoint of the first night (thinned to one an hour), not from the
        # beginning
        assert ts_to_ms(nights[0][-1]["ts"]) - HOUR <= start <= ts_to_ms(backlog[0]["ts"])
        _same(store, delivered, azul, as_of, tmp_path)
    finally:
        store.close()


def test_operator_entries_withdrawn_later_settled_or_in_the_head(store_url: str,
                                                                 tmp_path: Path) -> None:
    """sp-breakdown with operator entries (docs/records.md, "withdrawal"): an incident entered
    early in the run, withdrawn an hour of evaluations later (its entry deep in the settled
    engine: replayed from before it); the breakdown's own incident answered by a report, the
    report withdrawn; an incident entered a few seconds before the last ``as_of`` (judged in the
    head) and withdrawn at the next evaluation (both after the settled boundary). Equal to
    ``frota check --as-of`` after every evaluation."""
    recs, registry = _scenario("sp-breakdown")
    recs = _sorted(recs)
    vehicle = recs[0]["vehicle"]
    times = [ts_to_ms(r["ts"]) for r in recs]
    first, last = times[0], times[-1]
    seq = [0]

    def entry(ms: int, **fields: Any) -> Record:
        seq[0] += 1
        return {"vehicle": vehicle, "ts": ms_to_ts(ms), "agent": "operator", "seq": seq[0],
                "by": "review", **fields}

    def withdrawal(of: Record) -> Record:
        return entry(ts_to_ms(of["ts"]), kind="withdrawal", withdraws=of["seq"],
                     reason="entered by mistake")

    breakdown = next(r for r in recs if r["kind"] == "incident")
    early = entry(first + 20 * MINUTE, kind="incident", cause="accident", carrier_fault=True)
    report = entry(ts_to_ms(breakdown["ts"]) + 10 * MINUTE, kind="report",
                   incident_ts=breakdown["ts"], to="passengers")
    cuts, bursts = _bursts(recs, times, 6)
    extra: dict[int, list[Record]] = {0: [early], 2: [withdrawal(early)]}
    for k in range(6):
        if cuts[k] <= ts_to_ms(report["ts"]) < cuts[k + 1]:
            extra.setdefault(k, []).append(report)
            extra.setdefault(k + 1, []).append(withdrawal(report))
            break
    store = open_store(store_url)
    delivered: list[Record] = []
    try:
        live = _live(store, registry)
        as_of = first
        for k, burst in enumerate(bursts):
            arriving = burst + extra.get(k, [])
            store.put([record_row(r, 0) for r in arriving])
            delivered += arriving
            as_of = max([as_of, *(ts_to_ms(r["ts"]) for r in burst)])
            live.evaluate(as_of, as_of)
            _same(store, delivered, registry, as_of, tmp_path)
        late = entry(last - 5 * SECOND, kind="incident", cause="other")
        store.put([record_row(late, 0)])
        delivered.append(late)
        live.evaluate(last, last)
        _same(store, delivered, registry, last, tmp_path)
        gone = withdrawal(late)
        store.put([record_row(gone, 0)])
        delivered.append(gone)
        live.evaluate(last + SECOND, last + SECOND)
        _same(store, delivered, registry, last + SECOND, tmp_path)
        live.evaluate(last + HOUR, last + HOUR)
        _same(store, delivered, registry, last + HOUR, tmp_path)
    finally:
        store.close()


def test_a_bus_whose_clock_runs_ahead(store_url: str, tmp_path: Path) -> None:
    """One bus's clock runs 150 s ahead: its records reach the store long before ``as_of``
    passes their ``ts`` (kept in memory, judged only once ``as_of`` reaches them, as ``frota
    check --as-of`` ignores those after it). Equal to it at every evaluation."""
    recs, registry, vehicles = _same_ms_fleet(tmp_path, 4, 240)
    ahead = 150 * SECOND
    for rec in recs:
        if rec["vehicle"] == vehicles[0]:
            rec["ts"] = ms_to_ts(ts_to_ms(rec["ts"]) + ahead)
    sent = {id(r): ts_to_ms(r["ts"]) - (ahead if r["vehicle"] == vehicles[0] else 0)
            for r in recs}
    pending = sorted(recs, key=lambda r: sent[id(r)])
    start = min(sent.values())
    store = open_store(store_url)
    delivered: list[Record] = []
    try:
        live = _live(store, registry)
        k = 0
        while pending or k < 60:
            as_of = start + k * 3 * SECOND + 500
            now = [r for r in pending if sent[id(r)] <= as_of]
            pending = pending[len(now):]
            store.put([record_row(r, 0) for r in now])
            delivered += now
            live.evaluate(as_of, as_of)
            if k % 5 == 0 or not pending:
                _same(store, [r for r in delivered if ts_to_ms(r["ts"]) <= as_of], registry,
                      as_of, tmp_path)
            k += 1
        assert any(ts_to_ms(r["ts"]) > as_of for r in delivered)   # still ahead of as_of
        for later in (100 * SECOND, 200 * SECOND):      # as_of passes them, nothing new
            live.evaluate(as_of + later, as_of + later)
            _same(store, [r for r in delivered if ts_to_ms(r["ts"]) <= as_of + later],
                  registry, as_of + later, tmp_path)
    finally:
        store.close()
