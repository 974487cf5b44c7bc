"""Reading a few columns of a compacted vehicle-day without decoding it whole (the *Disco do dia*
and the API of a day read a year-long store's days this way).

:func:`collector.disc.decode_day` gives back every record's exact text, which means rebuilding
every dropped ``prev`` (a SHA-256 per record: most of its cost) and writing 172,800 JSON texts
for a day at 1 Hz. A page needs less: the time, kind and ``kmh`` of the samples, and the few
other records (driver, trip, door, device, incident, report) as values. :func:`project` reads
the blob's header and only the columns asked for (deltas of deltas summed back, at C speed
through :func:`itertools.accumulate`), and lines them up with the records through the shapes;
:meth:`DayColumns.events` rebuilds the non-sample records from their columns — without a
``prev`` the codec dropped (it is the hash of the record before; display readers do not need
it, nor a ``raw`` frame the codec rebuilds; ``Store.records`` still gives the exact texts).

The blob's layout is :mod:`collector.disc`'s (versions 1 and 2); a blob this module does not read
(another version, times not in canonical form) gives None and the caller decodes it whole.
"""

from __future__ import annotations

import hashlib
import operator
from collections import Counter
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, Final

import orjson
import zstandard

from collector import disc
from collector.weighed_cache import WeighedCache
from protocols.records import ms_to_ts, ts_to_ms

SAMPLES: Final = ("speed", "position")
_SAMPLE_SET: Final = frozenset(SAMPLES)
#: Projections kept in memory (all stores of the process together): a page reads a day's
#: speeds and events in turn, and the next view of the same day is served from here.
CACHE_DAYS: Final = 16
#: The most records the kept projections may hold together: a day of one bus at 1 Hz is
#: ≈ 170,000 records and ≈ 36 MiB projected with the columns a page decodes (≈ 220 bytes a
#: record), so sixteen of those held ≈ 580 MiB of a collector's memory for good; this bound
#: keeps about five (≈ 210 MiB).
CACHE_RECORDS: Final = 1_000_000
DROPPED_PREV: Final = "\x00prev"


@dataclass
class DayColumns:
    """One compacted day's records lined up by column (records in stored order)."""

    shapes: list[tuple[str, ...]]
    #: per record: its shape's index (-1 for a record kept verbatim)
    shape_of: list[int]
    ts_ms: list[int]
    kinds: list[str]
    _plain: bytes
    _spans: dict[str, tuple[str, int, int, int]]
    _verbatim: list[dict[str, Any]]
    _columns: dict[str, list[Any]] = field(default_factory=dict)
    _speeds: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    _events: list[int] | None = None

    def column(self, name: str) -> list[Any]:
        """A column's values, decoded once."""
        got = self._columns.get(name)
        if got is None:
            kind, at, nbytes, length = self._spans[name]
            data = self._plain[at:at + nbytes]
            words = orjson.loads(data.partition(b"\n")[0]) if kind == "dict" else None
            if words is not None and len(words) == 1:   # one value all day (vehicle, agent)
                got = [words[0]] * length
            else:
                got = disc._uncolumn(kind, data, length)
            self._columns[name] = got
        return got

    def speeds(self, kind: str, since_ms: int, until_ms: int) -> list[tuple[int, float]]:
        """(ts ms, kmh) of the ``kind`` records carrying ``kmh`` with since <= ts < until."""
        if "kmh" not in self._spans:
            return []
        got = self._speeds.get(kind)
        if got is None:
            has = [*("kmh" in keys for keys in self.shapes), False]    # [-1]: verbatim
            with_kmh = [has[s] for s in self.shape_of]
            values = self.column("kmh")
            if self._spans["kmh"][0] != "f3":           # an int or JSON column: as numbers
                values = [None if v is None else float(v) for v in values]
            got = self._speeds[kind] = [
                (ms, v) for ms, k, v in zip(compress(self.ts_ms, with_kmh),
                                            compress(self.kinds, with_kmh), values, strict=True)
                if k == kind and v is not None]
        if got and (got[0][0] < since_ms or got[-1][0] >= until_ms):
            return [one for one in got if since_ms <= one[0] < until_ms]
        return got

    def events(self, since_ms: int, until_ms: int) -> list[dict[str, Any]]:
        """The records other than samples with since <= ts < until, rebuilt from their columns
        (a ``prev`` or a ``raw`` the codec dropped, to rebuild on a whole decode, is left out)."""
        if self._events is None:   # the non-sample records' indices, found by C loops
            self._events = list(compress(range(len(self.kinds)),
                                         map(operator.not_, map(_SAMPLE_SET.__contains__,
                                                                self.kinds))))
        ts_ms = self.ts_ms
        wanted = [i for i in self._events if since_ms <= ts_ms[i] < until_ms]
        out: list[dict[str, Any]] = []
        seen: Counter[int] = Counter()
        done = 0
        verbatim_at = 0
        holders = {name: [s for s, keys in enumerate(self.shapes) if name in keys]
                   for name in self._spans}
        for i in wanted:
            seen.update(self.shape_of[done:i])
            done = i
            shape = self.shape_of[i]
            if shape < 0:
                verbatim_at = seen[-1]
                out.append(dict(self._verbatim[verbatim_at]))
                continue
            rec: dict[str, Any] = {}
            for key in self.shapes[shape]:
                if key == DROPPED_PREV:
                    continue
                if key == "ts":
                    rec[key] = ms_to_ts(self.ts_ms[i])
                    continue
                at = sum(seen[s] for s in holders[key])
                rec[key] = self.column(key)[at]
            out.append(rec)
        return out


def _project(blob: bytes) -> DayColumns | None:
    if not blob or blob[0] not in disc.VERSIONS:
        return None
    plain = zstandard.ZstdDecompressor().decompress(blob[1:])
    size = int.from_bytes(plain[:4], "little")
    head = orjson.loads(plain[4:4 + size])
    at = 4 + size
    count = int(head["n"])
    shape_of = disc._undod(plain[at:at + 8 * count])
    at += 8 * count
    spans: dict[str, tuple[str, int, int, int]] = {}
    for name, kind, length, nbytes in head["columns"]:
        spans[str(name)] = (str(kind), at, int(nbytes), int(length))
        at += int(nbytes)
    if spans.get("ts", ("",))[0] != "ts" or spans.get("kind", ("",))[0] != "dict":
        return None                     # times not in canonical form: decode it whole
    verbatim = [orjson.loads(t) for t in head["verbatim"]]
    day = DayColumns([tuple(s) for s in head["shapes"]], shape_of, [], [], plain, spans,
                     verbatim)
    ts_at, ts_bytes = spans["ts"][1], spans["ts"][2]
    stamps = disc._undod(plain[ts_at:ts_at + ts_bytes])
    kinds = day.column("kind")
    if not verbatim:
        day.ts_ms, day.kinds = stamps, kinds
        return day
    # records kept verbatim (a text that is not what its parsed form writes back; rare) are not
    # in the columns: interleave theirs; among the samples, the day is decoded whole instead
    if any(rec.get("kind") in SAMPLES for rec in verbatim):
        return None
    ts_it, kind_it, vb_it = iter(stamps), iter(kinds), iter(verbatim)
    for shape in shape_of:
        if shape >= 0:
            day.ts_ms.append(next(ts_it))
            day.kinds.append(next(kind_it))
        else:
            rec = next(vb_it)
            day.ts_ms.append(ts_to_ms(rec["ts"]))
            day.kinds.append(str(rec["kind"]))
    return day


_cache: WeighedCache[bytes, DayColumns | None] = WeighedCache(CACHE_DAYS, CACHE_RECORDS)


def project(blob: bytes) -> DayColumns | None:
    """A compacted day's columns (None: decode it whole with :func:`collector.disc.decode_day`)."""
    key = hashlib.blake2b(blob, digest_size=20).digest()
    hit = _cache.get(key)
    if hit is not None:
        return hit[0]
    got = _project(blob)
    _cache.put(key, got, 0 if got is None else len(got.ts_ms))
    return got


def clear_cache() -> None:
    """Forget every projected day (benchmarks and tests that time or check a cold read)."""
    _cache.clear()


def day_columns(store: Any, vehicle: str, day: str) -> DayColumns | None:
    """The columns of one compacted day of the store (None: gone since listed, or to be decoded
    whole)."""
    found = store._read("SELECT blob FROM disc_days WHERE vehicle = ? AND day = ?", (vehicle, day))
    return project(bytes(found[0][0])) if found else None
