"""The decoded compacted days a collector keeps in memory (collector/store_disc.py): at most
CACHE_DAYS of them and CACHE_BYTES of rows together, the oldest forgotten first — a week's
bundle, or a few pages, held 1.2 GB of a collector's memory for good when only the days were
counted."""

from __future__ import annotations

import json

import pytest

from collector import store_disc
from collector.disc import encode_day
from protocols.records import ms_to_ts

T0 = 1_772_445_600_000  # 2026-03-02T10:00:00Z


def _day(n: int, records: int = 50) -> tuple[bytes, bytes]:
    texts = [json.dumps({"vehicle": "FRT1A01", "ts": ms_to_ts(T0 + n * 86_400_000 + s * 1000),
                         "kind": "speed", "agent": "a1", "seq": 1000 + n * 100 + s, "kmh": 40},
                        separators=(",", ":")) for s in range(records)]
    return encode_day(texts), store_disc.pack_received([T0 + s for s in range(records)])


def _bytes_of(rows: list[store_disc.DayRow]) -> int:
    return sum(len(r.text) for r in rows) + store_disc.ROW_BYTES * len(rows)


def test_days_past_the_bytes_are_forgotten_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    store_disc.clear_cache()
    first = store_disc.decode_rows(*_day(0))
    one_day = _bytes_of(first)
    assert len(first) == 50
    monkeypatch.setattr(store_disc._cache, "max_weight", 3 * one_day)  # room for three days
    for n in range(1, 4):
        store_disc.decode_rows(*_day(n))
    assert len(store_disc._cache) == 3
    assert store_disc._cache.weight == 3 * one_day
    # day 0, the oldest, is gone: decoded again (a new list); day 3 is kept (the same list)
    assert store_disc.decode_rows(*_day(0)) is not first
    assert store_disc.decode_rows(*_day(3)) is store_disc.decode_rows(*_day(3))
    assert store_disc._cache.weight <= 3 * one_day
    store_disc.clear_cache()
    assert store_disc._cache.weight == 0


def test_a_day_larger_than_the_cache_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    store_disc.clear_cache()
    store_disc.decode_rows(*_day(0, records=10))
    monkeypatch.setattr(store_disc._cache, "max_weight", _bytes_of(store_disc.decode_rows(
        *_day(0, records=10))) * 2)
    rows = store_disc.decode_rows(*_day(1, records=100))  # five times a small day
    assert len(rows) == 100
    assert list(store_disc._cache.values())[-1] is not rows  # read, not kept
    assert len(store_disc._cache) == 1
    store_disc.clear_cache()


def test_at_most_cache_days_however_small(monkeypatch: pytest.MonkeyPatch) -> None:
    store_disc.clear_cache()
    for n in range(store_disc.CACHE_DAYS + 3):
        store_disc.decode_rows(*_day(n, records=2))
    assert len(store_disc._cache) == store_disc.CACHE_DAYS
    store_disc.clear_cache()


def test_projected_days_past_the_records_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages' projections of compacted days (collector/disc_columns.py): at most
    CACHE_RECORDS records together, the oldest day forgotten first."""
    from collector import disc_columns

    disc_columns.clear_cache()
    monkeypatch.setattr(disc_columns._cache, "max_weight", 120)  # two days of 50, not three
    blobs = [_day(n)[0] for n in range(3)]
    first = disc_columns.project(blobs[0])
    assert first is not None
    assert len(first.ts_ms) == 50
    disc_columns.project(blobs[1])
    assert disc_columns.project(blobs[0]) is first  # kept, and now the newest
    disc_columns.project(blobs[2])  # 150 records: day 1, the oldest, goes
    assert len(disc_columns._cache) == 2
    assert disc_columns._cache.weight == 100
    assert disc_columns.project(blobs[0]) is first
    assert disc_columns.project(blobs[1]) is not None
    assert disc_columns._cache.weight <= 120
    disc_columns.clear_cache()
    assert disc_columns._cache.weight == 0


def test_the_bounds_are_the_documented_ones() -> None:
    """docs/pages.md: 8 decoded days and 256 MiB of rows; 16 projected days and 1,000,000
    records."""
    from collector import disc_columns

    assert (store_disc._cache.max_entries, store_disc._cache.max_weight) == (8, 256 * 2**20)
    assert (disc_columns._cache.max_entries, disc_columns._cache.max_weight) == (16, 1_000_000)
