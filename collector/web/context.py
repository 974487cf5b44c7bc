"""What the pages and the API share: the store, the registry (re-read when its file changes),
the profiles, who may see which vehicle, and the findings filtered for a caller."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from collector import findings as stored_findings
from collector import registry as fleet
from collector.ingest import Ingest
from collector.rules.profile import Profile
from collector.store import Store
from collector.tokens import Token

if TYPE_CHECKING:
    from collector.web.export import BundleSigner
from collector.web.localtime import DEFAULT_PROFILE, Day, profile_zone, vehicle_zone
from protocols.records import ts_to_ms

log = logging.getLogger(__name__)


class NotFoundError(LookupError):
    """A vehicle, driver, trip or finding that does not exist or that the caller may not see."""


class RegistryFile:
    """The fleet registry of a file, re-read when the file changes (the last good one kept)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime = os.stat(path).st_mtime_ns
        self._registry = fleet.load(path)

    def __call__(self) -> fleet.Registry:
        with self._lock:
            try:
                mtime = os.stat(self.path).st_mtime_ns
                if mtime != self._mtime:
                    self._registry, self._mtime = fleet.load(self.path), mtime
            except (OSError, fleet.RegistryError) as err:
                log.error("pages: registry not reloaded, keeping the previous one: %s", err)
            return self._registry


@dataclass
class Filters:
    """The findings a caller asks for (every field optional)."""

    vehicle: str | None = None
    driver: str | None = None
    rule: str | None = None
    severity: str | None = None
    profile: str | None = None
    trip: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    open_only: bool = False


@dataclass
class Web:
    """The collector's state as the pages and the API read it."""

    store: Store
    registry: Callable[[], fleet.Registry]
    profiles: dict[str, Profile]
    ingest: Ingest
    operators: Callable[[], dict[str, str | None]] | None
    stale_after_s: float = 300.0
    #: who signs the bundles (collector/web/export.py); None on a collector without [trust]
    signer: BundleSigner | None = None

    def visible(self, token: Token, vehicle: str) -> bool:
        """Whether the caller may see the vehicle (an operador only its operator's)."""
        if token.role != "operador" or self.operators is None:
            return True
        return self.operators().get(vehicle) == token.operator

    def vehicles(self, token: Token) -> list[str]:
        """Every vehicle the caller may see: the registry's and those with stored records."""
        names = set(self.registry().vehicles) | set(self.store.vehicle_ids())
        return sorted(v for v in names if self.visible(token, v))

    def check_vehicle(self, token: Token, vehicle: str) -> None:
        """NotFoundError for an unknown vehicle or one outside an operador's fleet."""
        known = vehicle in self.registry().vehicles or vehicle in self.store.vehicle_ids()
        if not known or not self.visible(token, vehicle):
            raise NotFoundError(f"unknown vehicle {vehicle!r}")

    def check_driver(self, driver: str) -> str:
        """The registry id of a driver (by id or card); NotFoundError for an unknown one."""
        reg = self.registry()
        found = reg.driver_id(driver)
        if found not in reg.drivers:
            raise NotFoundError(f"unknown driver {driver!r}")
        return found

    def zone(self, vehicle: str | None = None) -> ZoneInfo:
        """The time zone of a vehicle's days (the default profile's without a vehicle)."""
        if vehicle is None:
            return profile_zone(self.profiles, DEFAULT_PROFILE)
        return vehicle_zone(self.registry(), self.profiles, vehicle)

    def day(self, day: date, vehicle: str | None = None) -> Day:
        """A local day in the vehicle's time zone."""
        return Day.of(day, self.zone(vehicle))

    @property
    def stop_kmh(self) -> float:
        """The default profile's stopped threshold."""
        return self.profiles[DEFAULT_PROFILE].stop_kmh

    def findings(self, token: Token, f: Filters) -> tuple[list[dict[str, Any]], int | None]:
        """The stored findings matching ``f`` that the caller may see, and their ``as_of``."""
        found, as_of = stored_findings.load(self.store, f.vehicle, f.since_ms)
        out: list[dict[str, Any]] = []
        reg = self.registry()
        for one in found:
            vehicle = one.get("vehicle")
            if token.role == "operador" and (vehicle is None or not self.visible(token, vehicle)):
                continue
            if f.driver is not None and one.get("driver") != reg.driver_id(f.driver):
                continue
            if f.open_only and one.get("end") is not None:
                continue
            if f.until_ms is not None and ts_to_ms(one["start"]) >= f.until_ms:
                continue
            if any(want is not None and one.get(key) != want for key, want in
                   (("rule", f.rule), ("severity", f.severity), ("profile", f.profile),
                    ("trip", f.trip))):
                continue
            out.append(dict(one))
        return out, as_of
