"""A trip as the law asks it analysed (*Viagem*): route from the positions, stops and their
points, passengers on board over time, departure against the schedule. Trips are read as
docs/rules.md, "How trips are read", says: departure is the first moment after ``trip start``
at which the vehicle moves; a stop lasts while the speed is below ``stop_kmh``; on board is the
running sum of boarded − alighted since the vehicle's previous ``trip end`` (never below 0)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from collector.entries import OPERATOR
from collector.registry import Line, Registry
from collector.store import Store
from protocols.records import ts_to_ms

#: A stop shorter than this is traffic, not a stop, on the page.
MIN_STOP_MS = 60_000
#: How far back the page looks for the vehicle's previous trip end (passengers on board).
LOOK_BACK_MS = 24 * 3_600_000


class TripNotFoundError(LookupError):
    """No ``trip start`` of that id for that vehicle."""


@dataclass(frozen=True)
class Stop:
    """A stop after departure: when, how long, where, and the line's point it was at."""

    start_ms: int
    end_ms: int
    lat: float | None
    lon: float | None
    point: str | None
    distance_m: float | None

    @property
    def minutes(self) -> float:
        """Its length in minutes."""
        return (self.end_ms - self.start_ms) / 60_000


@dataclass
class TripView:
    """What the *Viagem* page shows."""

    vehicle: str
    trip: str
    line: Line | None
    line_id: str
    start_ms: int
    end_ms: int
    ended: bool
    scheduled_ms: int | None
    departure_ms: int | None = None
    route: list[tuple[int, float, float]] = field(default_factory=list)   # (ms, lat, lon)
    stops: list[Stop] = field(default_factory=list)
    on_board: list[tuple[int, int]] = field(default_factory=list)          # (ms, people) steps
    boarded: int = 0
    alighted: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    tz: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))

    @property
    def late_min(self) -> float | None:
        """Departure minus the scheduled time, in minutes (None without either)."""
        if self.scheduled_ms is None or self.departure_ms is None:
            return None
        return (self.departure_ms - self.scheduled_ms) / 60_000

    @property
    def peak_on_board(self) -> int:
        """The most people on board at once."""
        return max((n for _, n in self.on_board), default=0)


def metres(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance (haversine, mean Earth radius)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6_371_008.8 * math.asin(min(1.0, math.sqrt(a)))


def nearest_point(line: Line | None, lat: float, lon: float) -> tuple[str | None, float | None]:
    """The line's point whose radius holds (lat, lon), else None with the nearest distance."""
    if line is None or not line.points:
        return None, None
    best = min(line.points, key=lambda p: metres(lat, lon, p.lat, p.lon))
    dist = metres(lat, lon, best.lat, best.lon)
    return (best.name if dist <= best.radius_m else None), dist


def standing(texts: Iterable[str]) -> list[dict[str, Any]]:
    """The records of ``texts`` (a vehicle's, as :meth:`Store.events` gives them) without the
    operator entries withdrawn among them nor the withdrawals: the rules judge a withdrawn entry
    as never entered (docs/records.md, ``withdrawal``), and so do the pages. A withdrawal carries
    its entry's ``ts``, so a period that holds the entry holds its withdrawal."""
    recs = [orjson.loads(t) for t in texts]
    gone = {rec["withdraws"] for rec in recs
            if rec["kind"] == "withdrawal" and rec.get("agent") == OPERATOR}
    return [rec for rec in recs if rec["kind"] != "withdrawal"
            and not (rec.get("agent") == OPERATOR and rec.get("seq") in gone)]


def find_trip(store: Store, vehicle: str, trip: str, lo_ms: int = -(1 << 62),
              hi_ms: int = 1 << 62) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The trip's latest ``start`` record on this vehicle and its ``end`` after it (or None);
    withdrawn operator entries do not count (:func:`standing`)."""
    start: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    for rec in standing(store.events(vehicle, lo_ms, hi_ms)):
        if rec["kind"] != "trip" or rec.get("trip") != trip:
            continue
        if rec["event"] == "start":
            start, end = rec, None
        elif start is not None:
            end = rec
    if start is None:
        raise TripNotFoundError(f"no trip {trip!r} on vehicle {vehicle!r}")
    return start, end


def trip_view(store: Store, registry: Registry, vehicle: str, trip: str, stop_kmh: float,
              now_ms: int, tz: ZoneInfo) -> TripView:
    """Read a trip of a vehicle (TripNotFoundError when the vehicle has no such trip)."""
    start, end = find_trip(store, vehicle, trip)
    lo = ts_to_ms(start["ts"])
    hi = ts_to_ms(end["ts"]) if end is not None else max(lo, now_ms)
    sched = start.get("scheduled")
    view = TripView(vehicle, trip, registry.lines.get(start["line"]), start["line"], lo, hi,
                    end is not None, None if sched is None else ts_to_ms(sched), tz=tz)
    for rec in map(orjson.loads, store.samples(vehicle, "position", lo, hi + 1)):
        view.route.append((ts_to_ms(rec["ts"]), float(rec["lat"]), float(rec["lon"])))
    speeds = [(ts_to_ms(r["ts"]), float(r["kmh"]))
              for r in map(orjson.loads, store.samples(vehicle, "speed", lo, hi + 1))]
    if not speeds:
        speeds = [(ts_to_ms(r["ts"]), float(r["kmh"])) for r in
                  map(orjson.loads, store.samples(vehicle, "position", lo, hi + 1))
                  if r.get("kmh") is not None]
    _stops(view, speeds, stop_kmh)
    _passengers(store, view)
    view.events = [r for r in standing(store.events(vehicle, lo, hi + 1))
                   if r["kind"] in ("incident", "report", "device", "driver")]
    return view


def _place(view: TripView, a: int, b: int) -> tuple[float | None, float | None]:
    """Where the vehicle stood during [a, b]: the latest fix in it, else the last before it."""
    found: tuple[float | None, float | None] = (None, None)
    for ms, lat, lon in view.route:
        if ms > b:
            break
        found = (lat, lon)
    return found


def _stops(view: TripView, speeds: list[tuple[int, float]], stop_kmh: float) -> None:
    stopped_since: int | None = None      # a gap in the samples while stopped: the stop goes on
    for ms, kmh in speeds:
        if kmh >= stop_kmh:
            if view.departure_ms is None:
                view.departure_ms = ms
            elif stopped_since is not None and ms - stopped_since >= MIN_STOP_MS:
                _add_stop(view, stopped_since, ms)
            stopped_since = None
        elif view.departure_ms is not None and stopped_since is None:
            stopped_since = ms
    if stopped_since is not None and view.end_ms - stopped_since >= MIN_STOP_MS:
        _add_stop(view, stopped_since, view.end_ms)


def _add_stop(view: TripView, a: int, b: int) -> None:
    lat, lon = _place(view, a, b)
    point, dist = (None, None) if lat is None or lon is None else nearest_point(view.line, lat, lon)
    view.stops.append(Stop(a, b, lat, lon, point, dist))


def _passengers(store: Store, view: TripView) -> None:
    since = view.start_ms - LOOK_BACK_MS
    doors: list[dict[str, Any]] = []
    for rec in standing(store.events(view.vehicle, since, view.end_ms + 1)):
        ms = ts_to_ms(rec["ts"])
        if rec["kind"] == "trip" and rec["event"] == "end" and ms <= view.start_ms:
            doors = []                       # everyone alighted at the previous trip's end
        elif rec["kind"] == "door":
            doors.append(rec)
    on = 0
    view.on_board.append((view.start_ms, 0))
    for rec in doors:
        ms = ts_to_ms(rec["ts"])
        up, down = int(rec.get("boarded") or 0), int(rec.get("alighted") or 0)
        on = max(0, on + up - down)
        view.boarded += up                   # those who boarded before trip start travel too
        view.alighted += down
        at = max(ms, view.start_ms)
        if view.on_board and view.on_board[-1][0] == at:
            view.on_board[-1] = (at, on)
        else:
            view.on_board.append((at, on))
    if view.ended and on != 0:                   # everyone alights at the final terminal
        view.alighted += on
        view.on_board.append((view.end_ms, 0))
