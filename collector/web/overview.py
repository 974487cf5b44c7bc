"""The *Frota* page's rows: each vehicle the caller may see, online or not, its last position
and speed, its open findings and how far behind its records are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from collector.tokens import Token
from collector.web.context import Filters, Web
from protocols.records import ts_to_ms


@dataclass
class FleetRow:
    """One vehicle on the *Frota* page."""

    vehicle: str
    operator: str | None
    status: str                      # online, offline, stale, unknown (the agent's, /health)
    last_ms: int | None              # the newest record's time
    lag_s: float | None              # how far behind the records are (backlog)
    speed_kmh: float | None
    position: tuple[float, float] | None
    position_ms: int | None
    open_findings: int

    def as_dict(self) -> dict[str, Any]:
        """The API's form."""
        return {"vehicle": self.vehicle, "operator": self.operator, "status": self.status,
                "last_ms": self.last_ms, "lag_s": self.lag_s, "speed_kmh": self.speed_kmh,
                "position": None if self.position is None else
                {"lat": self.position[0], "lon": self.position[1]},
                "open_findings": self.open_findings}


def fleet_rows(web: Web, user: Token, now_ms: int) -> list[FleetRow]:
    """Every visible vehicle's row."""
    health = web.ingest.health(web.stale_after_s, now_ms)["vehicles"]
    found, _ = web.findings(user, Filters(open_only=True))
    open_by: dict[str, int] = {}
    for f in found:
        if f.get("vehicle"):
            open_by[f["vehicle"]] = open_by.get(f["vehicle"], 0) + 1
    states = {v.vehicle: v for v in web.store.vehicles()}
    operators = {k: v.operator for k, v in web.registry().vehicles.items()}
    rows = []
    for vehicle in web.vehicles(user):
        h = health.get(vehicle, {})
        state = states.get(vehicle)
        last = None if state is None else state.last_ts_ms
        speed = web.store.latest(vehicle, "speed")
        pos = web.store.latest(vehicle, "position")
        prec = None if pos is None else orjson.loads(pos)
        srec = None if speed is None else orjson.loads(speed)
        if srec is None and prec is not None and prec.get("kmh") is not None:
            srec = prec
        rows.append(FleetRow(
            vehicle, operators.get(vehicle), str(h.get("status") or "unknown"), last,
            None if last is None else round((now_ms - last) / 1000, 1),
            None if srec is None else float(srec["kmh"]),
            None if prec is None else (float(prec["lat"]), float(prec["lon"])),
            None if prec is None else ts_to_ms(prec["ts"]),
            open_by.get(vehicle, 0)))
    return rows
