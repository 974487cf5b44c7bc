"""What the demo prints at the end: the trip's summary from the collector's database, and findings.

The findings of the trip are the rules engine's over every stored record, judged as of the trip's
last device record: what ``frota check --as-of`` that time gives on the same records, computed
by :func:`collector.findings.evaluate_store`, the function the running collector evaluates live.
The collector's own live findings are judged at *its* clock (today), so deadlines and monthly
statistics of a trip played with last March's dates show there as due; the demo says how many
there are and how to see them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from collector.localtime import finding_profile, finding_text, home_profile, local_text
from collector.rules.profile import load_profiles
from collector.store import StoreError, open_store
from collector.store_summary import VehicleSummary
from protocols.records import ms_to_ts


def summarize(database: Path, vehicle: str) -> VehicleSummary:
    """Counts per kind, time span, odometer and passengers of a vehicle's stored records."""
    store = open_store(str(database), read_only=True)
    try:
        return store.vehicle_summary(vehicle)
    finally:
        store.close()


def vehicle_zone(registry_path: Path, vehicle: str) -> ZoneInfo:
    """The local time of a vehicle: its home profile's zone (registry), else the default's."""
    from collector import registry as fleet

    return home_profile(vehicle, fleet.load(registry_path), load_profiles()).tz


def summary_lines(s: VehicleSummary, tz: ZoneInfo | None = None) -> list[str]:
    """The summary as printed (times in ``tz``, local time for people; UTC without)."""
    def when(ms: int) -> str:
        return _short_ts(ms_to_ts(ms)) if tz is None else local_text(ms_to_ts(ms), tz)

    lines = [f"Stored for {s.vehicle}: {s.total:,} records"
             + (f", the trip from {when(s.first_ms)} to {when(s.last_ms)}"
                if s.first_ms is not None and s.last_ms is not None else "")]
    lines.append("  " + " · ".join(f"{kind} {n:,}" for kind, n in s.kinds))
    if s.odometer_m is not None:
        lo, hi = s.odometer_m
        lines.append(f"  distance {(hi - lo) / 1000:,.1f} km (odometer {lo / 1000:,.1f} → "
                     f"{hi / 1000:,.1f} km)")
    lines.append(f"  passengers {s.boarded} boarded, {s.alighted} alighted")
    return lines


def trip_findings(database: Path, registry_path: Path, as_of_ms: int) -> list[dict[str, Any]]:
    """The rules over every stored record as of ``as_of_ms`` (the collector must be stopped)."""
    from collector import registry as fleet
    from collector.findings import evaluate_store
    from collector.store import open_store

    store = open_store(str(database), create=False)
    try:
        found = evaluate_store(store, fleet.load(registry_path), as_of_ms)
    finally:
        store.close()
    return [dict(f) for f in found]


def live_findings(database: Path) -> tuple[list[dict[str, Any]], int | None]:
    """The findings the running collector keeps (read-only) and the clock they were judged at."""
    try:
        store = open_store(str(database), read_only=True)
    except StoreError:
        return [], None
    try:
        texts, as_of = store.findings()
    except StoreError:
        return [], None
    finally:
        store.close()
    return [orjson.loads(text) for text in texts], as_of


def _short_ts(ts: str | None) -> str:
    return "open" if ts is None else ts.replace(".000Z", "Z")


def finding_line(f: Mapping[str, Any]) -> str:
    """One finding on one line: severity, rule, who, when (local time of the finding's
    profile), the figures, the first legal basis, the validity caveat."""
    return "  " + finding_text(f, finding_profile(f, None, load_profiles()))


def findings_lines(found: Sequence[Mapping[str, Any]], as_of_ms: int,
                   problems: Sequence[str]) -> list[str]:
    """The findings block as printed, with how they compare to the scenario's expectations."""
    as_of = _short_ts(ms_to_ts(as_of_ms))
    lines = [f"Findings of the trip (the rules over every stored record as of its end, {as_of}; "
             f"what 'frota check --as-of {as_of}' gives): {len(found)}"]
    lines += [finding_line(f) for f in found] or ["  none: the trip kept the law"]
    if problems:
        lines.append("  NOT what the scenario expects: " + "; ".join(problems))
    else:
        lines.append("  as the scenario expects")
    return lines
