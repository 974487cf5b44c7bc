"""Hand-built timelines for rule tests: records at minutes after a start, and a small registry."""

from __future__ import annotations

import itertools
from typing import Any

from collector.registry import Registry
from collector.rules import Engine, evaluate, load_profiles
from collector.rules.profile import Profile
from protocols.records import ms_to_ts, ts_to_ms, validate

REGISTRY_DOC: dict[str, Any] = {
    "lines": [
        {"id": "SP-1", "profile": "SP", "service": "rodoviario", "length_km": 430,
         "speed_limit_kmh": 80,
         "speed_zones": [{"limit_kmh": 60, "lat": -23.0, "lon": -46.0, "radius_m": 1000}]},
        {"id": "SP-NOLIMIT", "profile": "SP", "service": "rodoviario", "length_km": 100},
        {"id": "SP-110", "profile": "SP", "service": "rodoviario", "length_km": 100,
         "speed_limit_kmh": 110},
        {"id": "BA-LONG", "profile": "BA", "service": "rodoviario", "length_km": 526},
        {"id": "BA-525", "profile": "BA", "service": "rodoviario", "length_km": 525},
        {"id": "TO-1", "profile": "TO", "service": "rodoviario", "length_km": 300},
    ],
    "vehicles": [{"id": "V1", "seats": 46, "capacity": 46}, {"id": "V2", "seats": 46}],
    "drivers": [
        {"id": "D1", "name": "Maria Souza", "card": "C1"},
        {"id": "D2", "name": "João Lima", "card": "C2"},
    ],
}
REGISTRY = Registry.from_dict(REGISTRY_DOC)
PROFILES = load_profiles()

#: A day in each driver-time period (docs/rules.md), 10:00 UTC = 07:00 in São Paulo.
ADI = "2026-03-02T10:00:00.000Z"
LEI_13103 = "2020-03-02T10:00:00.000Z"
LEI_12619 = "2013-03-04T10:00:00.000Z"
BEFORE_2012 = "2010-03-01T10:00:00.000Z"

MIN = 60_000
HOUR = 3_600_000


class Timeline:
    """Records placed at offsets (ms) from a start; ``drive`` and friends add common shapes."""

    def __init__(self, start: str = ADI) -> None:
        self.t0 = ts_to_ms(start)
        self.records: list[dict[str, Any]] = []

    def ts(self, offset_ms: int) -> str:
        """The timestamp ``offset_ms`` after the start."""
        return ms_to_ts(self.t0 + offset_ms)

    def add(self, kind: str, vehicle: str, offset_ms: int, **fields: Any) -> Timeline:
        """Any record."""
        rec = {"vehicle": vehicle, "ts": self.ts(offset_ms), "kind": kind, **fields}
        self.records.append(validate(rec))
        return self

    def speed(self, vehicle: str, offset_ms: int, kmh: float) -> Timeline:
        """A registrador speed sample."""
        return self.add("speed", vehicle, offset_ms, kmh=kmh)

    def slot(self, vehicle: str, offset_ms: int, slot: int, card: str | None,
             activity: str) -> Timeline:
        """A driver record (card or driver id, or None for an empty slot)."""
        return self.add("driver", vehicle, offset_ms, slot=slot, driver=card, activity=activity)

    def trip(self, vehicle: str, offset_ms: int, event: str, trip: str, line: str) -> Timeline:
        """A trip start or end."""
        return self.add("trip", vehicle, offset_ms, event=event, trip=trip, line=line)

    def moving(self, vehicle: str, start_ms: int, end_ms: int, kmh: float = 80,
                every_ms: int = 10 * MIN) -> Timeline:
        """The vehicle moves from ``start_ms`` and is stopped (0 km/h) at ``end_ms``."""
        t = start_ms
        while t < end_ms:
            self.speed(vehicle, t, kmh)
            t += every_ms
        return self.speed(vehicle, end_ms, 0)

    def findings(self, profile: str = "SP", as_of_ms: int | None = None,
                 profiles: dict[str, Profile] | None = None) -> list[dict[str, Any]]:
        """Every finding of the engine over these records."""
        as_of = None if as_of_ms is None else self.t0 + as_of_ms
        return evaluate(REGISTRY, profiles or PROFILES, self.records, profile, as_of)


def of(findings: list[dict[str, Any]], rule: str) -> list[dict[str, Any]]:
    """The findings of one rule."""
    return [f for f in findings if f["rule"] == rule]


def numbered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records in time order, numbered as an agent per bus does (``agent``, ``seq``)."""
    records = sorted(records, key=lambda r: (r["ts"], r["vehicle"]))
    seq: dict[str, int] = {}
    for rec in records:  # an agent per bus numbers its records in time order
        seq[rec["vehicle"]] = seq.get(rec["vehicle"], 0) + 1
        rec["agent"] = f"agent-{rec['vehicle']}"
        rec["seq"] = seq[rec["vehicle"]]
    return records


def engine_findings(registry: Registry, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings of an engine (profile SP) given the records in one batch."""
    engine = Engine(registry, PROFILES, "SP")
    engine.add(records)
    return engine.findings()


def rebatched_findings(registry: Registry, records: list[dict[str, Any]], order: list[int],
                       cuts: list[int], peek: bool) -> list[dict[str, Any]]:
    """The findings of an engine given ``records`` in ``order``, in batches cut at ``cuts``,
    flushed after each batch and, with ``peek``, looked at too (as a collector does)."""
    shuffled = [records[i] for i in order]
    engine = Engine(registry, PROFILES, "SP")
    bounds = [0, *sorted(cuts), len(shuffled)]
    for a, b in itertools.pairwise(bounds):
        engine.add(shuffled[a:b])
        engine.flush()
        if peek:
            engine.findings()  # a collector showing findings between batches
    return engine.findings()
