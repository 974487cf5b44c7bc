"""A vehicle's day (*Disco do dia*) and a driver's day across vehicles (*Jornada*), read from
the store. How records are read follows docs/rules.md, "How records are read": moving is a
registrador speed at or above the profile's ``stop_kmh`` (GPS speed when the vehicle has no
registrador samples); between samples the last state holds, for at most :data:`GAP_MS`; a driver's
effective activity is ``drive`` in slot 1 while moving, ``available`` in slot 2 while moving, the
declared one while stopped (``unknown`` counts as work), and rest when in no slot.
"""

from __future__ import annotations

import itertools
import operator
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import reduce
from itertools import compress
from typing import Any

import orjson

from collector import disc_summary, speed_minutes
from collector.registry import Registry
from collector.store import Store
from collector.web.localtime import Day
from protocols.records import ts_to_ms

#: A sample holds until the next one, for at most this long (the registrador's silence limit).
GAP_MS = 60_000
MINUTE_MS = 60_000
#: A rest piece shorter than this is not a break (Lei 13.103's pieces of at least 5 minutes).
BREAK_PIECE_MS = 5 * MINUTE_MS
ACTIVITIES = ("drive", "work", "available", "rest")


@dataclass(frozen=True)
class Event:
    """Something that happened at one instant of a day (driver change, opening, trip...)."""

    ms: int
    kind: str
    text: str
    record: dict[str, Any]
    #: for driver records, who it names (registry id, ``card``, or None for an empty slot)
    who: str | None = None


@dataclass
class VehicleDay:
    """What the *Disco do dia* shows of a vehicle's day."""

    vehicle: str
    day: Day
    #: per minute of the day: (max km/h, min km/h, moved) or None without samples
    minutes: list[tuple[float, float, bool] | None] = field(default_factory=list)
    #: (ms, cumulative km) at each minute with samples, for the distance zig-zag
    distance: list[tuple[int, float]] = field(default_factory=list)
    max_kmh: float | None = None
    max_at_ms: int | None = None
    moving_ms: int = 0
    distance_km: float = 0.0
    samples: int = 0
    source: str = "registrador"
    events: list[Event] = field(default_factory=list)
    trips: list[tuple[str, int, str | None]] = field(default_factory=list)  # (trip, start, line)

    #: the driver at the wheel (slot 1) when the day began (registry id, or None)
    first_driver: str | None = None

    @property
    def driver_changes(self) -> list[Event]:
        """The moments the person at the wheel (slot 1) changed: a card put in, taken out or
        replaced by another (activity changes of the same driver are not changes)."""
        out = []
        current = self.first_driver
        for e in self.events:
            if e.kind == "driver" and e.record.get("slot") == 1:
                who = e.who
                if who != current:
                    out.append(e)
                current = who
        return out

    @property
    def withdrawn(self) -> set[int]:
        """The seqs of the day's operator entries withdrawn (a withdrawal carries its entry's
        ``ts``: both are in the same day)."""
        return {int(e.record["withdraws"]) for e in self.events if e.kind == "withdrawal"
                and e.record.get("agent") == "operator"}

    @property
    def openings(self) -> list[Event]:
        """The registrador's compartment openings."""
        return [e for e in self.events if e.kind == "compartment_open"]


def _speed_columns(store: Store, vehicle: str, lo: int,
                   hi: int) -> tuple[list[int], list[float], str]:
    """:func:`_speeds` as two lists (ts ms, km/h): what :func:`_trace_columns` reads."""
    ts, kmh = store.speed_columns(vehicle, "speed", lo, hi)
    if ts:
        return ts, kmh, "registrador"
    ts, kmh = store.speed_columns(vehicle, "position", lo, hi)
    return ts, kmh, "gps"


def _speeds(store: Store, vehicle: str, lo: int, hi: int) -> tuple[list[tuple[int, float]], str]:
    """(ms, km/h) of the registrador's speed samples, or of the GPS when there are none."""
    out = store.speeds(vehicle, "speed", lo, hi)
    if out:
        return out, "registrador"
    return store.speeds(vehicle, "position", lo, hi), "gps"


def driver_name(registry: Registry, driver: str | None) -> str:
    """``D-1001 (Maria Souza)`` for a registry driver; the id (card) otherwise."""
    if driver is None:
        return "sem condutor"
    known = registry.drivers.get(registry.driver_id(driver))
    if known is None:
        return driver
    return f"{known.id} ({known.name})" if known.name else known.id


def _mapped(registry: Registry, rec: dict[str, Any]) -> str | None:
    """Who a driver record names: the registry id, a card of no known driver as itself,
    ``card`` for a card the source cannot identify, None for an empty slot."""
    who = rec.get("driver")
    if who is None:
        return "card" if rec.get("card") else None
    return registry.driver_id(str(who))


def _event(registry: Registry, rec: dict[str, Any]) -> Event | None:
    ms, kind = ts_to_ms(rec["ts"]), rec["kind"]
    if kind == "driver":
        who = "cartão sem identificação" if rec.get("card") and not rec.get("driver") else \
            driver_name(registry, rec.get("driver"))
        text = f"condutor {rec['slot']}: {who}, {ACTIVITY_WORDS.get(rec['activity'], rec['activity'])}"
        return Event(ms, kind, text, rec, _mapped(registry, rec))
    if kind == "device" and rec.get("status") == "compartment_open":
        return Event(ms, "compartment_open", "abertura do compartimento do registrador", rec)
    if kind == "device":
        return Event(ms, "device", f"{rec['device']}: {rec['status']}", rec)
    if kind == "trip":
        word = "início" if rec["event"] == "start" else "fim"
        return Event(ms, kind, f"{word} da viagem {rec['trip']} (linha {rec['line']})", rec)
    if kind == "incident":
        return Event(ms, kind, f"ocorrência declarada: {CAUSE_WORDS.get(rec['cause'], rec['cause'])}", rec)
    if kind == "report":
        return Event(ms, kind, f"relato registrado para {rec['to']}", rec)
    if kind == "withdrawal":
        return Event(ms, kind, f"retirada da entrada nº {rec['withdraws']}: {rec['reason']}", rec)
    return None


ACTIVITY_WORDS = {"drive": "direção", "work": "trabalho", "available": "disponibilidade",
                  "rest": "descanso", "unknown": "não informada"}
CAUSE_WORDS = {"breakdown": "pane", "accident": "acidente", "accident_victims": "acidente com vítimas",
               "force_majeure": "força maior", "road_blocked": "via interditada", "other": "outra"}


def vehicle_day(store: Store, registry: Registry, vehicle: str, day: Day,
                stop_kmh: float) -> VehicleDay:
    """Read a vehicle's day: per-minute speed, moving time, distance, events."""
    out = VehicleDay(vehicle, day)
    if not _summarized(out, store, stop_kmh):
        found = speed_minutes.read_day(store, vehicle, day.lo_ms, day.hi_ms, stop_kmh) \
            if isinstance(store, Store) else None   # the agent's buffer keeps none
        if found is not None:      # a day as rows, from its minutes kept at ingest
            out.source = found[0]
            _trace_minutes(out, found[1], stop_kmh)
        else:
            ts, kmh, out.source = _speed_columns(store, vehicle, day.lo_ms, day.hi_ms)
            out.samples = len(ts)
            _trace_columns(out, ts, kmh, stop_kmh)
    for rec in map(orjson.loads, store.events(vehicle, day.lo_ms - 24 * 3_600_000, day.lo_ms,
                                               exact=False)):
        if rec["kind"] == "driver" and rec.get("slot") == 1:
            out.first_driver = _mapped(registry, rec)
    starts = []
    for rec in map(orjson.loads, store.events(vehicle, day.lo_ms, day.hi_ms, exact=False)):
        event = _event(registry, rec)
        if event is not None:
            out.events.append(event)
        if rec["kind"] == "trip" and rec["event"] == "start":
            starts.append(rec)
    gone = out.withdrawn    # a withdrawn trip entry is no trip (the rules', the Viagem's reading)
    out.trips = [(rec["trip"], ts_to_ms(rec["ts"]), rec.get("line")) for rec in starts
                 if not (rec.get("agent") == "operator" and rec.get("seq") in gone)]
    return out


def _summarized(out: VehicleDay, store: Store, stop_kmh: float) -> bool:
    """The trace from the compacted day's summary (collector/disc_summary.py: ``_trace`` of the
    same samples, run by the compaction job), when the day is compacted with one for these
    bounds and this stop speed and no sample of it is a row; False: read the samples."""
    if not isinstance(store, Store):  # the agent's buffer (agent/roadside_page.py): no disc days
        return False
    day = out.day
    summary = disc_summary.read(store, out.vehicle, day.day.isoformat())
    if summary is None or (summary.day_start_ms, summary.day_end_ms, summary.stop_kmh) != \
            (day.lo_ms, day.hi_ms, stop_kmh) or store.has_samples(out.vehicle, day.lo_ms, day.hi_ms):
        return False
    out.source, out.samples = summary.source, summary.samples
    out.minutes = [None if m is None else (m[0], m[1], m[0] >= stop_kmh) for m in summary.minutes]
    out.distance, out.distance_km = summary.distance, summary.distance_km
    out.max_kmh, out.max_at_ms, out.moving_ms = summary.max_kmh, summary.max_at_ms, summary.moving_ms
    return True


def _trace(out: VehicleDay, speeds: list[tuple[int, float]], stop_kmh: float) -> None:
    """Per-minute maximum, minimum and movement, distance, time moving and the peak of a day's
    samples (in ts order). A day at 1 Hz is 86,400 samples: the sums run through ``map`` and
    ``accumulate`` and each minute's extremes through ``max``/``min`` of its slice (C loops),
    in the order a plain loop would add them, so the figures are the same to the last bit."""
    _trace_columns(out, [ms for ms, _ in speeds], [v for _, v in speeds], stop_kmh)


def _trace_columns(out: VehicleDay, ts: list[int], kmh: list[float], stop_kmh: float) -> None:
    """:func:`_trace` of the samples as two lists (ts ms, km/h), as the store reads them. The
    distance adds, minute by minute in order, the step into the minute's first sample (but for
    the day's first) plus the minute's own steps added from 0.0 — the additions the per-minute
    summary of a day as rows (collector/speed_minutes.py) makes, so both give the same bits."""
    day = out.day
    n = max(1, (day.hi_ms - day.lo_ms + MINUTE_MS - 1) // MINUTE_MS)
    out.minutes = [None] * n
    if not ts:
        return
    steps = list(map(operator.sub, ts[1:], ts[:-1]))
    if steps and not 0 < min(steps) <= max(steps) <= GAP_MS:
        # a gap longer than GAP_MS, or two samples in one millisecond: that step counts nothing
        steps = [dt if 0 < dt <= GAP_MS else 0 for dt in steps]
    before = kmh[:-1]
    products = list(map(operator.mul, before, steps))   # km/h x ms of the step k -> k + 1
    out.moving_ms = sum(compress(steps, map(stop_kmh.__le__, before)))
    lo = day.lo_ms
    cuts = [bisect_left(ts, lo + i * MINUTE_MS) for i in range(n)] + [len(ts)]
    travelled = 0.0
    for i in range(n):
        a, b = cuts[i], cuts[i + 1]
        if a < b:
            piece = kmh[a:b]
            top = max(piece)
            out.minutes[i] = (top, min(piece), top >= stop_kmh)
            own = reduce(operator.add, products[a:b - 1], 0.0)
            travelled += own if a == 0 else products[a - 1] + own
            out.distance.append((lo + i * MINUTE_MS, travelled / 3_600_000))
    out.distance_km = travelled / 3_600_000
    best = max(kmh)
    out.max_kmh, out.max_at_ms = best, ts[kmh.index(best)]


def _trace_minutes(out: VehicleDay, minutes: list[speed_minutes.Minute], stop_kmh: float) -> None:
    """:func:`_trace_columns` from the day's per-minute summary (collector/speed_minutes.py,
    judged at ``stop_kmh``): the same figures, read from at most 1,440 rows."""
    day = out.day
    n = max(1, (day.hi_ms - day.lo_ms + MINUTE_MS - 1) // MINUTE_MS)
    out.minutes = [None] * n
    lo = day.lo_ms
    travelled = 0.0
    for k, m in enumerate(minutes):
        i = (m.minute_ms - lo) // MINUTE_MS
        out.minutes[i] = (m.max_kmh, m.min_kmh, m.max_kmh >= stop_kmh)
        if k == 0:      # the day's first sample: its step comes from the day before
            travelled += m.internal
            out.moving_ms += m.moving
        else:
            travelled += m.incoming + m.internal
            out.moving_ms += m.moving_in + m.moving
        out.distance.append((lo + i * MINUTE_MS, travelled / 3_600_000))
        if out.max_kmh is None or m.max_kmh > out.max_kmh:
            out.max_kmh, out.max_at_ms = m.max_kmh, m.max_ts
        out.samples += m.n
    out.distance_km = travelled / 3_600_000


# -- a driver's day ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Piece:
    """A stretch of a driver's day with one effective activity (vehicle None: in no slot)."""

    start_ms: int
    end_ms: int
    activity: str
    vehicle: str | None
    slot: int | None

    @property
    def minutes(self) -> float:
        """Its length in minutes."""
        return (self.end_ms - self.start_ms) / MINUTE_MS


@dataclass
class DriverDay:
    """What the *Jornada* shows: the pieces of the day, totals, breaks, vehicles."""

    driver: str
    day: Day
    pieces: list[Piece] = field(default_factory=list)

    @property
    def vehicles(self) -> list[str]:
        """The vehicles the driver was in, in order of first use."""
        seen: dict[str, None] = {}
        for p in self.pieces:
            if p.vehicle is not None:
                seen.setdefault(p.vehicle)
        return list(seen)

    def totals_min(self) -> dict[str, float]:
        """Minutes of each activity in the day."""
        out = dict.fromkeys(ACTIVITIES, 0.0)
        for p in self.pieces:
            out[p.activity] += p.minutes
        return out

    def breaks(self) -> list[Piece]:
        """Rest pieces of at least 5 minutes between the first and the last non-rest piece."""
        busy = [p for p in self.pieces if p.activity != "rest"]
        if not busy:
            return []
        lo, hi = busy[0].start_ms, busy[-1].end_ms
        return [p for p in self.pieces if p.activity == "rest" and p.start_ms >= lo
                and p.end_ms <= hi and p.end_ms - p.start_ms >= BREAK_PIECE_MS]


def _slot_spans(registry: Registry, driver: str, recs: Iterable[dict[str, Any]], lo: int,
                hi: int) -> list[tuple[int, int, int, str]]:
    """(start, end, slot, declared activity) while ``driver`` holds a slot, clipped to [lo, hi)."""
    spans: list[tuple[int, int, int, str]] = []
    held: dict[int, tuple[int, str]] = {}      # slot -> (since, activity) while it is the driver's
    for rec in recs:
        ms, slot = ts_to_ms(rec["ts"]), int(rec["slot"])
        who = rec.get("driver")
        mine = who is not None and registry.driver_id(who) == driver
        if slot in held:
            since, act = held.pop(slot)
            spans.append((since, ms, slot, act))
        if mine:
            held[slot] = (ms, str(rec["activity"]))
    for slot, (since, act) in held.items():
        spans.append((since, hi, slot, act))
    return [(max(a, lo), min(b, hi), s, act) for a, b, s, act in spans if b > lo and a < hi]


def _moving_spans(speeds: list[tuple[int, float]], stop_kmh: float) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for (ms, kmh), nxt in zip(speeds, [*speeds[1:], None], strict=True):
        if kmh < stop_kmh:
            continue
        end = ms + GAP_MS if nxt is None else min(nxt[0], ms + GAP_MS)
        if spans and spans[-1][1] >= ms:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((ms, end))
    return spans


def _split(start: int, end: int, slot: int, declared: str, vehicle: str,
           moving: list[tuple[int, int]]) -> list[Piece]:
    """A slot span cut into moving and stopped pieces with their effective activity."""
    stopped_act = "work" if declared == "unknown" else declared
    moving_act = "drive" if slot == 1 else ("rest" if declared == "rest" else "available")
    pieces: list[Piece] = []
    at = start
    for a, b in moving:
        if b <= at or a >= end:
            continue
        a, b = max(a, at), min(b, end)
        if a > at:
            pieces.append(Piece(at, a, stopped_act, vehicle, slot))
        pieces.append(Piece(a, b, moving_act, vehicle, slot))
        at = b
    if at < end:
        pieces.append(Piece(at, end, stopped_act, vehicle, slot))
    return pieces


RANK = {"drive": 3, "work": 2, "available": 1, "rest": 0}


def driver_day(store: Store, registry: Registry, driver: str, day: Day, vehicles: Iterable[str],
               stop_kmh: float) -> DriverDay:
    """Read a driver's day across ``vehicles`` (those the caller may see)."""
    out = DriverDay(driver, day)
    found: list[Piece] = []
    look_back = day.lo_ms - 24 * 3_600_000      # who held the slots at midnight
    for vehicle in vehicles:
        recs = [r for r in map(orjson.loads, store.events(vehicle, look_back, day.hi_ms, exact=False))
                if r["kind"] == "driver"]
        spans = _slot_spans(registry, driver, recs, day.lo_ms, day.hi_ms)
        if not spans:
            continue
        lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
        speeds, _ = _speeds(store, vehicle, lo - GAP_MS, hi)
        moving = _moving_spans(speeds, stop_kmh)
        for a, b, slot, act in spans:
            found.extend(_split(a, b, slot, act, vehicle, moving))
    # one activity per instant: the busier one where two vehicles overlap (docs/rules.md)
    cuts = sorted({day.lo_ms, day.hi_ms, *(p.start_ms for p in found), *(p.end_ms for p in found)})
    for a, b in itertools.pairwise(cuts):
        over = [p for p in found if p.start_ms < b and p.end_ms > a]
        best = max(over, key=lambda p: RANK[p.activity], default=None)
        piece = Piece(a, b, "rest", None, None) if best is None else \
            Piece(a, b, best.activity, best.vehicle, best.slot)
        last = out.pieces[-1] if out.pieces else None
        if last is not None and (last.activity, last.vehicle, last.slot) == \
                (piece.activity, piece.vehicle, piece.slot) and last.end_ms == a:
            out.pieces[-1] = Piece(last.start_ms, b, last.activity, last.vehicle, last.slot)
        else:
            out.pieces.append(piece)
    return out
