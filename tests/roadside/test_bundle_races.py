"""A collector's bundle made while the store changes under it (collector/web/export.py streams
the records into the ZIP as the store yields them, page by page): a day of the period compacted
between two pages, records arriving meanwhile. ``frota verify`` (protocols/bundle_check.py) must
find the bundle made honestly INTACT, and a bundle of an empty period too."""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from collector import compaction
from collector import store as store_module
from collector.ingest import Ingest
from collector.rules.profile import load_profiles
from collector.store import Store, open_store, record_row
from collector.tokens import Token
from collector.web import export
from collector.web.context import RegistryFile, Web
from protocols.bundle_check import check_bundle
from protocols.chain import GENESIS, record_hash
from protocols.records import ts_to_ms
from tests.pages.conftest import fleet_signer
from tests.pages.fleet import OPERATORS, _render, write_registry
from tests.roadside.bundles import chained_store
from tests.services import unnamed_files

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


def _signer() -> tuple[Any, Any]:
    return fleet_signer(not_before=dt.datetime(2026, 3, 1, tzinfo=dt.UTC))  # made at NOW


def _check(web: Web, since: int, until: int) -> tuple[Any, int]:
    signer, ca = _signer()
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


def _records_member(data: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return zf.read("records.jsonl")


def test_a_period_across_a_compacted_day_gives_the_same_records(web: Web) -> None:
    """2026-03-01 to 2026-03-04 (seq 101 of the day before among them): the same
    ``records.jsonl`` byte for byte once 2026-03-02 is compacted, and intact."""
    since, until = ts_to_ms("2026-03-01T03:00:00Z"), ts_to_ms("2026-03-04T03:00:00Z")
    signer, ca = _signer()
    before = export.bundle(web, FISCAL, "FRT1A01", since, until, signer, NOW)
    assert compaction.compact_day(web.store, "FRT1A01", date(2026, 3, 2), DAY_LO, DAY_HI,
                                  now_ms=NOW) is not None
    after = export.bundle(web, FISCAL, "FRT1A01", since, until, signer, NOW)
    assert _records_member(after) == _records_member(before)
    report = check_bundle(after, ca)
    assert report.intact, report.problems[:5]
    assert report.records == check_bundle(before, ca).records > 13_000
    # the compacted day alone, and a period ending inside it
    for lo, hi in ((DAY_LO, DAY_HI), (DAY_LO + 3_600_000, DAY_HI - 3_600_000)):
        report = check_bundle(export.bundle(web, FISCAL, "FRT1A01", lo, hi, signer, NOW), ca)
        assert report.intact, report.problems[:5]


def test_a_member_lying_about_its_size_is_unreadable_not_read_whole(web: Web) -> None:
    """A zip bomb: a member of 50 MB of zeros whose headers say 10 bytes. The checker reads no
    more than the declared size (the CRC then fails): a problem, never the 50 MB."""
    signer, ca = _signer()
    data = export.bundle(web, FISCAL, "FRT1A01", DAY_LO, DAY_HI, signer, NOW)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, \
            zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        dst.writestr("findings.jsonl.bak", b"\0" * (50 << 20))
    raw = bytearray(out.getvalue())
    # the bomb's sizes (uncompressed: 4 bytes at 22 in its local header, 24 in its central
    # directory entry) rewritten as 10
    name = b"findings.jsonl.bak"
    local = raw.rfind(b"PK\x03\x04", 0, raw.find(name))
    central = raw.rfind(b"PK\x01\x02", 0, raw.rfind(name))
    raw[local + 22:local + 26] = (10).to_bytes(4, "little")
    raw[central + 24:central + 28] = (10).to_bytes(4, "little")
    codes = {p.code for p in check_bundle(bytes(raw), ca).problems}
    assert "unreadable" in codes


def test_a_bundle_made_while_a_late_record_of_its_period_arrives_is_intact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seq 50 (a record of the period, in the middle of the chain) arrives late — a batch
    redelivered, or stored by another collector of a shared store — while the bundle is read
    past its time: the bundle must not list it as a link outside the period, which ``frota
    verify`` reads as a record removed (``missing_in_period``)."""
    records = _render("sp-clean", tmp_path / "clean.jsonl")
    records.sort(key=lambda r: ts_to_ms(str(r["ts"])))
    registry = write_registry(tmp_path)
    prev, rows = GENESIS, []
    for seq, rec in enumerate(records[:400], start=1):
        chained = {**rec, "agent": "a1", "seq": seq, "prev": prev}
        digest = record_hash(chained)
        rows.append(record_row(chained, NOW, digest, prev))
        prev = digest
    late = rows.pop(49)
    store = open_store(str(tmp_path / "collector.db"))
    try:
        store.put(rows, (), [("FRT1A01", rows[-1][4], NOW, "a1")])
        web = Web(store, RegistryFile(registry), load_profiles(), Ingest(
            store, lambda: frozenset(OPERATORS)), lambda: dict(OPERATORS))
        monkeypatch.setattr(store_module, "PAGE", 50)
        read = Store._rows
        arrived: list[int] = []

        def rows_then_arrive(self: Store, vehicle: str, lo: int, hi: int
                             ) -> Iterator[tuple[int, int, str]]:
            for n, row in enumerate(read(self, vehicle, lo, hi)):
                if n == 120 and not arrived:  # past seq 50's time
                    arrived.append(self.put([late]))
                yield row

        monkeypatch.setattr(Store, "_rows", rows_then_arrive)
        report, _ = _check(web, DAY_LO, DAY_HI)
        assert arrived == [1]
        assert report.intact, report.problems[:5]
        assert report.records == 400
    finally:
        store.close()


def test_a_zip_listing_thousands_of_members_is_refused_before_it_is_opened(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A central directory of 30,000 empty members (a 2.6 MB file; at 2 GB, tens of GB of
    memory to open): too large, found from the ZIP's end record before ``zipfile`` lists it."""
    from protocols import bundle_check

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for n in range(30_000):
            zf.writestr(f"{n}", b"")
    data = out.getvalue()

    def never(*_: object, **__: object) -> None:
        raise AssertionError("the ZIP was opened")

    monkeypatch.setattr(zipfile, "ZipFile", never)
    assert [p.code for p in check_bundle(data, None).problems] == ["too_large"]
    monkeypatch.undo()
    # and a file larger than any bundle is not opened either
    monkeypatch.setattr(bundle_check, "MAX_BUNDLE", len(data) - 1)
    assert [p.code for p in check_bundle(data, None).problems] == ["too_large"]


def test_frota_verify_does_not_read_a_file_larger_than_any_bundle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from frota.cli import main
    from protocols import bundle_check

    path = tmp_path / "huge.zip"
    path.write_bytes(b"PK" + b"\0" * 1000)
    monkeypatch.setattr(bundle_check, "MAX_BUNDLE", 999)

    def never(*_: object) -> bytes:
        raise AssertionError("the file was read")

    monkeypatch.setattr(Path, "read_bytes", never)
    assert main(["verify", str(path)]) == 3
    assert "too large to check" in capsys.readouterr().out


def test_a_bundle_past_its_memory_is_a_temporary_file_that_verifies(
        web: Web, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``export.IN_MEMORY`` the ZIP is written to an unnamed temporary file (not held in
    memory): the same records, intact, and the file gone once closed."""
    signer, ca = _signer()
    whole = export.bundle(web, FISCAL, "FRT1A01", DAY_LO, DAY_HI, signer, NOW)
    monkeypatch.setattr(export, "IN_MEMORY", 4096)
    before = unnamed_files()
    made = export.bundle_file(web, FISCAL, "FRT1A01", DAY_LO, DAY_HI, signer, NOW)
    try:
        assert unnamed_files() == before + 1  # (held in memory, it would have none)
        data = made.read()
    finally:
        made.close()
    assert unnamed_files() == before
    assert len(data) > 4096
    report = check_bundle(data, ca)
    assert report.intact, report.problems
    assert _records_of(data) == _records_of(whole)


def _records_of(bundle: bytes) -> bytes:
    return zipfile.ZipFile(io.BytesIO(bundle)).read("records.jsonl")

