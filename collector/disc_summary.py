"""What the *Disco do dia* draws of a compacted vehicle-day, kept beside its blob (migration
``017_disc_summary``; docs/collector.md, "The digital disc at rest").

A page of a compacted day used to decode the day's columns (172,800 records at 1 Hz) and its
previous day's (who was driving at midnight) at its first view: ~0.3-0.6 s. The compaction job
now writes, in the transaction that writes the ``disc_days`` row, a summary of that row's
records: the speed trace as the page reads it (per minute the maximum and minimum km/h, the
distance at the minute's last sample, the time moving at the profile's ``stop_kmh``, the peak,
the samples' count and source: :func:`collector.web.dayview._trace` run on the same samples in
the same order) and the texts of the records other than samples (driver, trip, device, door...:
a few dozen a day). The page reads the summary (a few kB) instead of the day's columns; the
same events feed every ``Store.events(..., exact=False)`` reader (the previous day's driver at
midnight included). The summary goes with its row: a late record that reopens the day deletes
the row, and the next compaction writes both again. A row without one (compacted before this
migration) or a day read with another ``stop_kmh`` or other bounds is read as before; the
days compacted before the migration get theirs from :func:`backfill` (``frota collector
compact`` and the daily compaction job, newest days first).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any, Final
from zoneinfo import ZoneInfo

import orjson
import zstandard

from protocols.records import ts_to_ms

if TYPE_CHECKING:
    from collector.store import Store
    from collector.store_disc import DiscDay

VERSION: Final = 1
SAMPLES: Final = ("speed", "position")


@dataclass(frozen=True)
class DaySummary:
    """A compacted day's summary (see the module docstring)."""

    day_start_ms: int
    day_end_ms: int
    stop_kmh: float
    source: str
    samples: int
    #: per minute: (max km/h, min km/h) or None without samples
    minutes: list[tuple[float, float] | None]
    distance: list[tuple[int, float]]
    distance_km: float
    max_kmh: float | None
    max_at_ms: int | None
    moving_ms: int
    #: (ts ms, seq, text) of the day's records other than samples, in stored order
    events: list[tuple[int, int, str]]


def summarize(texts: list[str], start: int, end: int, stop_kmh: float) -> bytes:
    """The summary of a day's record texts (in stored order: ts, seq, row) with local bounds
    [start, end), as zstd JSON."""
    from collector.web.dayview import VehicleDay, _trace  # the page's own reading
    from collector.web.localtime import Day

    speed: list[tuple[int, float]] = []
    position: list[tuple[int, float]] = []
    events: list[tuple[int, int, str]] = []
    for text in texts:
        rec = orjson.loads(text)
        kind = rec.get("kind")
        ms = ts_to_ms(rec["ts"])
        if kind in SAMPLES:
            kmh = rec.get("kmh")
            if kmh is not None and start <= ms < end:
                (speed if kind == "speed" else position).append((ms, float(kmh)))
        else:
            events.append((ms, int(rec.get("seq") or 0), text))
    samples, source = (speed, "registrador") if speed else (position, "gps")
    out = VehicleDay("", Day(date.min, ZoneInfo("UTC"), start, end))   # only its bounds are read
    _trace(out, samples, stop_kmh)
    body = {"v": VERSION, "start": start, "end": end, "stop_kmh": stop_kmh, "source": source,
            "samples": len(samples), "minutes": [None if m is None else m[:2] for m in out.minutes],
            "distance": out.distance, "distance_km": out.distance_km, "max_kmh": out.max_kmh,
            "max_at_ms": out.max_at_ms, "moving_ms": out.moving_ms, "events": events}
    return zstandard.ZstdCompressor(level=3).compress(orjson.dumps(body))


def parse(blob: bytes) -> DaySummary | None:
    """A summary back (None: a version this reader does not know)."""
    body: dict[str, Any] = orjson.loads(zstandard.ZstdDecompressor().decompress(blob))
    if body.get("v") != VERSION:
        return None
    return DaySummary(int(body["start"]), int(body["end"]), float(body["stop_kmh"]),
                      str(body["source"]), int(body["samples"]),
                      [None if m is None else (m[0], m[1]) for m in body["minutes"]],
                      [(int(ms), km) for ms, km in body["distance"]], body["distance_km"],
                      body["max_kmh"], body["max_at_ms"], int(body["moving_ms"]),
                      [(int(ms), int(seq), str(t)) for ms, seq, t in body["events"]])


def write(store: Store, tx: Any, vehicle: str, day: str, texts: list[str], start: int, end: int,
          stop_kmh: float) -> None:
    """Write a day's summary into its ``disc_days`` row, inside the caller's transaction."""
    store._executemany(tx, "UPDATE disc_days SET summary = ? WHERE vehicle = ? AND day = ?",
                       [(summarize(texts, start, end, stop_kmh), vehicle, day)])


def read(store: Store, vehicle: str, day: str) -> DaySummary | None:
    """A compacted day's summary (None: not compacted, or compacted without one)."""
    found = store._read("SELECT summary FROM disc_days WHERE vehicle = ? AND day = ?",
                        (vehicle, day))
    if not found or found[0][0] is None:
        return None
    return parse(bytes(found[0][0]))


def add(store: Store, day: DiscDay, stop_kmh: float) -> bool:
    """Summarize a day compacted without a summary (before migration ``017_disc_summary``, or by
    bench.longstore): its records decoded whole; written only if the row is still the one read
    (same ``made_ms``). Whether it was written."""
    from collector import store_disc

    texts = [r.text for r in store_disc.day_rows(store, day)]
    if not texts:
        return False
    blob = summarize(texts, day.day_start_ms, day.day_end_ms, stop_kmh)
    store.apply([("UPDATE disc_days SET summary = ? WHERE vehicle = ? AND day = ? AND made_ms = ?",
                  [(blob, day.vehicle, day.day, day.made_ms)])])
    return read(store, day.vehicle, day.day) is not None


def missing(store: Store) -> list[tuple[str, str]]:
    """(vehicle, day) of the compacted days without a summary, newest day first (the days most
    likely to be looked at)."""
    return [(str(v), str(d)) for v, d in store._read(
        "SELECT vehicle, day FROM disc_days WHERE summary IS NULL ORDER BY day DESC, vehicle")]


def backfill(store: Store, stop_kmh: float, *, budget_s: float | None = None,
             pause_s: float = 0.0, dry_run: bool = False) -> tuple[int, int]:
    """Summarize the days compacted without a summary (:func:`add`: each decoded whole, a few
    seconds for a day at 1 Hz), newest first, until ``budget_s`` has passed (None: all of them);
    (days summarized, days still without one). ``dry_run``: count them only."""
    from collector import store_disc

    todo = missing(store)
    if dry_run:
        return 0, len(todo)
    started = time.monotonic()
    done = 0
    for at, (vehicle, name) in enumerate(todo):
        if budget_s is not None and time.monotonic() - started >= budget_s:
            return done, len(todo) - at
        found = [store_disc._day(r) for r in store._read(
            f"SELECT {', '.join(store_disc.DAY_COLUMNS)} FROM disc_days WHERE vehicle = ? "
            "AND day = ?", (vehicle, name))]
        if found and read(store, vehicle, name) is None and add(store, found[0], stop_kmh):
            done += 1
        if pause_s:
            time.sleep(pause_s)  # let the ingest's next commit in between two days
    return done, len(missing(store))
