"""The bundle of one vehicle's records for a period (issue 17 item 3): a ZIP file that an
inspector can check without the collector.

Contents (``docs/pages.md``, "The bundle"):

- ``records.jsonl``: the stored records with since <= ts < until in (ts, seq) order, one per line
  in their canonical form (``protocols.canonical.canonical``, RFC 8785, docs/records.md);
- ``findings.jsonl``: the vehicle's findings overlapping the period (RFC 8785 each);
- ``disco-AAAA-MM-DD.svg``: the *Disco do dia* of every local day the period touches;
- ``manifest.json``: schema, vehicle, period, time zone, when and by whom it was made, and for
  every file above its size and SHA-256 (RFC 8785 bytes);
- ``manifest.sig``: the Ed25519 signature of ``manifest.json``'s bytes by the collector's key
  (base64), with ``certs/collector.pem`` (the collector's certificate) and ``certs/ca.pem``
  (the fleet CA's) that chain it; absent, and ``"signed": false`` in the manifest, on a collector
  without ``[trust]`` (docs/trust.md).

The ZIP itself, the manifest's common fields and ``chains`` are ``protocols/bundle.py``'s, shared
with ``frota verify BUNDLE`` (``protocols/bundle_check.py``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, BinaryIO, cast

import orjson

from collector import store_disc
from collector.bundle_links import SeqRuns, outside_links
from collector.web import dayview, svg
from collector.web.context import Filters, Web
from collector.web.localtime import FIRST_DAY, LAST_DAY, Day, local
from protocols.bundle import BUNDLE_SCHEMA, BundleSigner, Chains, pack_to
from protocols.canonical import canonical, jcs
from protocols.records import ms_to_ts, ts_to_ms

#: The longest period one bundle holds (days): inspectors ask for the last days (SP 61 §3).
MAX_DAYS = 31
#: How many times a bundle is made again when a day of its period was compacted meanwhile.
TRIES = 3
#: Bytes of a bundle kept in memory while it is made; beyond, it is a temporary file.
IN_MEMORY = 8 * 1024 * 1024
#: Bytes a bundle is sent in, a read at a time.
CHUNK = 1024 * 1024


#: The period's bounds (UTC ms): one day inside FIRST_DAY .. LAST_DAY, so that every local day
#: the period touches, in any zone, is a day the pages can draw.
_EARLIEST_MS = int(datetime.combine(FIRST_DAY + timedelta(1), time(), UTC).timestamp() * 1000)
_LATEST_MS = int(datetime.combine(LAST_DAY - timedelta(1), time(), UTC).timestamp() * 1000)


class ExportError(ValueError):
    """A period that cannot be exported; the message says why."""


def check_period(since_ms: int, until_ms: int) -> None:
    """ExportError unless 0 < until − since <= MAX_DAYS days and the local days of the period
    lie in FIRST_DAY .. LAST_DAY in every zone (a day's margin at either end)."""
    if since_ms < _EARLIEST_MS or until_ms > _LATEST_MS:
        raise ExportError(f"the period must lie between {FIRST_DAY.isoformat()} and "
                          f"{LAST_DAY.isoformat()}")
    if until_ms <= since_ms:
        raise ExportError("until must be after since")
    if until_ms - since_ms > MAX_DAYS * 86_400_000:
        raise ExportError(f"a bundle holds at most {MAX_DAYS} days; ask for several")


def bundle(web: Web, user: Any, vehicle: str, since_ms: int, until_ms: int,
           signer: BundleSigner | None, now_ms: int, extra: dict[str, Any] | None = None) -> bytes:
    """:func:`bundle_file`'s bytes (a day's page, an accident's period, the command line)."""
    with bundle_file(web, user, vehicle, since_ms, until_ms, signer, now_ms, extra) as out:
        return out.read()


def bundle_file(web: Web, user: Any, vehicle: str, since_ms: int, until_ms: int,
                signer: BundleSigner | None, now_ms: int, extra: dict[str, Any] | None = None
                ) -> BinaryIO:
    """The ZIP of the bundle (the caller has checked the vehicle and the period), in a file
    read from its start: in memory up to :data:`IN_MEMORY` bytes, in a temporary file beyond
    (31 days of a bus at 1 Hz make a ZIP of ≈ 270 MB, which the collector held twice); the
    caller closes it (the temporary file goes with it).
    ``extra``: more manifest fields (the accident-data export's ``finding``). The records are
    written into the ZIP as the store yields them (``pack_to``): what is held is the compressed
    bundle and each agent's seqs, not every record's text and line (31 days at 1 Hz are
    millions).

    The store is read page by page while the ZIP is written, and it may change meanwhile:

    - a day of the period compacted (its rows moved into ``disc_days`` between two pages)
      would be missing from the bundle — and, the records after the move being the chains'
      last, the bundle would still verify INTACT. The compacted days of the period are compared
      before and after;
    - a record of the period stored late in the middle of a chain (a batch redelivered, or
      stored by another collector of a shared store) after its time was read: the manifest's
      link for its seq then has a time inside the period, which ``frota verify`` reads as a
      record removed (``missing_in_period``).

    Either way the bundle is made again (:data:`TRIES` times; then ExportError for the first,
    the last bundle for the second: a link inside the period that stays is the store's own,
    and the bundle says so)."""
    check_period(since_ms, until_ms)
    for attempt in range(TRIES):
        before = store_disc.days(web.store, vehicle, since_ms, until_ms)
        # returned open (the caller closes it); typeshed's SpooledTemporaryFile is no BinaryIO
        out = cast(BinaryIO, tempfile.SpooledTemporaryFile(max_size=IN_MEMORY))  # noqa: SIM115
        try:
            whole = _bundle(out, web, user, vehicle, since_ms, until_ms, signer, now_ms, extra)
            compacted = store_disc.days(web.store, vehicle, since_ms, until_ms) != before
        except BaseException:
            out.close()
            raise
        if not compacted and (whole or attempt == TRIES - 1):  # the last try's link stays
            out.seek(0)
            return out
        out.close()
    raise ExportError("the period's days were being compacted while the bundle was made; "
                      "try again")


def _bundle(out: BinaryIO, web: Web, user: Any, vehicle: str, since_ms: int, until_ms: int,
            signer: BundleSigner | None, now_ms: int, extra: dict[str, Any] | None) -> bool:
    """One making of :func:`bundle_file`'s ZIP into ``out``; False when a link of the
    manifest's ``outside`` has its time inside the period (a record stored while the bundle
    was read)."""
    summed, counted, whole = Chains(), [0], [True]
    seqs: dict[str, SeqRuns] = {}  # each agent's seqs in the bundle (for the outside links)

    def record_lines() -> Iterator[bytes]:
        for text in web.store.records(vehicle, since_ms, until_ms):
            rec = orjson.loads(text)
            line = canonical(rec)
            summed.add(line, rec)
            counted[0] += 1
            if isinstance(rec.get("agent"), str) and type(rec.get("seq")) is int:
                runs = seqs.get(rec["agent"])
                if runs is None:
                    runs = seqs[rec["agent"]] = SeqRuns()
                runs.add(rec["seq"])
            yield line + b"\n"

    found, as_of = web.findings(user, Filters(vehicle=vehicle, since_ms=since_ms, until_ms=until_ms))
    tz = web.zone(vehicle)
    registry = web.registry()

    def disc(day: date) -> Iterator[bytes]:  # drawn when the ZIP comes to it
        d = dayview.vehicle_day(web.store, registry, vehicle, Day.of(day, tz), web.stop_kmh)
        yield svg.disc(d).encode()

    files: list[tuple[str, Iterable[bytes]]] = [
        ("records.jsonl", record_lines()), ("findings.jsonl", [jcs(f) + b"\n" for f in found])]
    day, last = local(since_ms, tz).date(), local(until_ms - 1, tz).date()
    while day <= last:
        files.append((f"disco-{day.isoformat()}.svg", disc(day)))
        day += timedelta(days=1)

    def finish() -> dict[str, Any]:
        manifest: dict[str, Any] = {
            "vehicle": vehicle, "from": ms_to_ts(since_ms), "to": ms_to_ts(until_ms),
            "timezone": tz.key, "created": ms_to_ts(now_ms), "records": counted[0],
            "findings": len(found), "findings_as_of": None if as_of is None else ms_to_ts(as_of),
            "record_schema": 1, "chains": summed.result(),
        }
        manifest["outside"] = outside_links(web.store, vehicle, manifest["chains"], seqs,
                                            since_ms)
        whole[0] = not any(_inside(link.get("ts"), since_ms, until_ms)
                           for link in manifest["outside"])
        manifest.update(extra or {})
        return manifest

    pack_to(out, files, finish, signer)
    return whole[0]


def chunks(out: BinaryIO) -> Iterator[bytes]:
    """``out`` read :data:`CHUNK` bytes at a time, then closed (however the reading ends)."""
    try:
        while block := out.read(CHUNK):
            yield block
    finally:
        out.close()


def _inside(ts: Any, since_ms: int, until_ms: int) -> bool:
    """Whether a link's time lies in the period (as protocols/bundle_check.py reads it)."""
    try:
        return isinstance(ts, str) and since_ms <= ts_to_ms(ts) < until_ms
    except ValueError:
        return False


def day_period(web: Web, vehicle: str, day_text: str) -> tuple[int, int]:
    """The local day ``AAAA-MM-DD`` of the vehicle as (since, until) ms."""
    d = Day.of(date.fromisoformat(day_text), web.zone(vehicle))
    return d.lo_ms, d.hi_ms


def parse_bound(name: str, text: str, web: Web, vehicle: str) -> int:
    """A bound typed by a person: RFC 3339, or a date (its first instant, vehicle's local time)."""
    from collector.localtime import LocalTimeError, person_time_ms

    try:
        return person_time_ms(text, web.zone(vehicle))
    except LocalTimeError as err:
        raise ExportError(f"{name}: {err}") from None


__all__ = ["BUNDLE_SCHEMA", "MAX_DAYS", "BundleSigner", "ExportError", "bundle", "bundle_file",
           "check_period", "chunks", "day_period", "parse_bound", "ts_to_ms"]
