"""A collector's bundle made while the store changes under it (collector/web/export.py streams
the records into the ZIP as the store yields them, page by page): a day of the period compacted
between two pages, records arriving meanwhile. ``frota verify`` (protocols/bundle_check.py) must
find the bundle made honestly INTACT, and a bundle of an empty period too."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from collector import compaction
from collector import store as store_module
from collector.ingest import Ingest
from collector.rules.profile import load_profiles
from collector.store import Store, open_store
from collector.tokens import Token
from collector.web import export
from collector.web.context import RegistryFile, Web
from protocols.bundle_check import check_bundle
from protocols.records import ts_to_ms
from tests.pages.conftest import fleet_signer
from tests.pages.fleet import OPERATORS
from tests.roadside.bundles import chained_store

FISCAL = Token("t1", "fiscal", None, "2026-03-05T00:00:00.000Z", "x")
# 2026-03-02 in America/Sao_Paulo (UTC-3)
DAY_LO, DAY_HI = ts_to_ms("2026-03-02T03:00:00Z"), ts_to_ms("2026-03-03T03:00:00Z")
NOW = ts_to_ms("2026-03-05T12:00:00Z")


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Web]:
    db, registry = chained_store(tmp_path)
    store = open_store(str(db))
    try:
        yield Web(store, RegistryFile(registry), load_profiles(), Ingest(
            store, lambda: frozenset(OPERATORS)), lambda: dict(OPERATORS))
    finally:
        store.close()


def _check(web: Web, since: int, until: int) -> tuple[Any, int]:
    signer, ca = fleet_signer(not_before=dt.datetime(2026, 3, 1, tzinfo=dt.UTC))  # made at NOW
    data = export.bundle(web, FISCAL, "FRT1A01", since, until, signer, NOW)
    report = check_bundle(data, ca)
    return report, web.store.count("FRT1A01")


def test_a_fresh_bundle_and_an_empty_period_are_intact(web: Web) -> None:
    report, _ = _check(web, DAY_LO, DAY_HI)
    assert report.intact, report.problems
    assert report.records > 100
    empty, _ = _check(web, ts_to_ms("2026-03-10T03:00:00Z"), ts_to_ms("2026-03-11T03:00:00Z"))
    assert empty.intact, empty.problems
    assert empty.records == 0


def test_a_bundle_made_while_its_day_is_compacted_is_intact(
        web: Web, monkeypatch: pytest.MonkeyPatch) -> None:
    """The day is compacted after the export has read its first page of rows: the bundle
    holds every record of the period all the same (or the export is refused), never a bundle
    that ``frota verify`` finds NOT INTACT."""
    expected = sum(1 for _ in web.store.records("FRT1A01", DAY_LO, DAY_HI))
    monkeypatch.setattr(store_module, "PAGE", 50)
    rows = Store._rows
    compacted: list[object] = []

    def rows_then_compact(self: Store, vehicle: str, lo: int, hi: int
                          ) -> Iterator[tuple[int, int, str]]:
        for n, row in enumerate(rows(self, vehicle, lo, hi)):
            if n == 60 and not compacted:  # into the second page
                compacted.append(compaction.compact_day(
                    self, vehicle, date(2026, 3, 2), DAY_LO, DAY_HI, now_ms=NOW))
            yield row

    monkeypatch.setattr(Store, "_rows", rows_then_compact)
    report, _ = _check(web, DAY_LO, DAY_HI)
    assert compacted
    assert compacted[0] is not None
    assert report.intact, report.problems[:5]
    assert report.records == expected
