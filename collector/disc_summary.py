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
migration) or a day read with another ``stop_kmh`` or other bounds is read as before.
"""

from __future__ import annotations

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
