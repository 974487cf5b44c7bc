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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from frota.demo.watch import query
from protocols.records import ms_to_ts


@dataclass
class Summary:
    """The stored trip in numbers."""

    vehicle: str
    kinds: list[tuple[str, int]] = field(default_factory=list)
    first_ms: int | None = None
    last_ms: int | None = None
    odometer_m: tuple[int, int] | None = None
    boarded: int = 0
    alighted: int = 0
    agents: int = 0

    @property
    def total(self) -> int:
        """Records stored for the vehicle."""
        return sum(n for _, n in self.kinds)


def summarize(database: Path, vehicle: str) -> Summary:
    """Counts per kind, time span, odometer and passengers of a vehicle's stored records."""
    out = Summary(vehicle)
    out.kinds = [(str(k), int(str(n))) for k, n in query(
        database, "SELECT kind, COUNT(*) FROM records WHERE vehicle = ? GROUP BY kind "
        "ORDER BY COUNT(*) DESC, kind", (vehicle,))]
    # The agent's own records before any device spoke carry the host's clock (agent-config.md,
    # "Time stamps"), today rather than the trip's day: the span is the devices' records.
    span = query(database, "SELECT MIN(ts_ms), MAX(ts_ms), COUNT(DISTINCT agent) FROM records "
                 "WHERE vehicle = ? AND kind IN ('speed', 'position')", (vehicle,))
    if span and span[0][0] is not None:
        out.first_ms, out.last_ms = int(str(span[0][0])), int(str(span[0][1]))
        out.agents = int(str(span[0][2]))
    odo = query(database, "SELECT MIN(json_extract(record, '$.odometer_m')), "
                "MAX(json_extract(record, '$.odometer_m')) FROM records "
                "WHERE vehicle = ? AND kind = 'speed'", (vehicle,))
    if odo and odo[0][0] is not None:
        out.odometer_m = (int(str(odo[0][0])), int(str(odo[0][1])))
    people = query(database, "SELECT COALESCE(SUM(json_extract(record, '$.boarded')), 0), "
                   "COALESCE(SUM(json_extract(record, '$.alighted')), 0) FROM records "
                   "WHERE vehicle = ? AND kind = 'door'", (vehicle,))
    if people:
        out.boarded, out.alighted = int(str(people[0][0])), int(str(people[0][1]))
    return out


def summary_lines(s: Summary) -> list[str]:
    """The summary as printed."""
    lines = [f"Stored for {s.vehicle}: {s.total:,} records"
             + (f", the trip from {_short_ts(ms_to_ts(s.first_ms))} to "
                f"{_short_ts(ms_to_ts(s.last_ms))}"
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
    rows = query(database, "SELECT finding FROM findings")
    state = query(database, "SELECT value FROM findings_state WHERE name = 'as_of_ms'")
    found = [orjson.loads(str(row[0])) for row in rows]
    return found, int(str(state[0][0])) if state else None


def _short_ts(ts: str | None) -> str:
    return "open" if ts is None else ts.replace(".000Z", "Z")


def finding_line(f: Mapping[str, Any]) -> str:
    """One finding on one line: severity, rule, who, when, the figures, the first legal basis."""
    who = " ".join(str(f[k]) for k in ("vehicle", "driver", "line") if f.get(k))
    details = f.get("details") or {}
    figures = ", ".join(f"{k} {v}" for k, v in list(details.items())[:4]
                        if isinstance(v, int | float | str) and len(str(v)) <= 30)
    basis = (f.get("basis") or [""])[0]
    text = (f"  {f.get('severity', ''):<10} {f.get('rule', ''):<24} {who}  "
            f"{_short_ts(f.get('start'))} → {_short_ts(f.get('end'))}")
    if figures:
        text += f"  ({figures})"
    if basis:
        text += f"  [{basis}]"
    return text


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
