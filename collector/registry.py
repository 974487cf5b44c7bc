"""The fleet registry (docs/records.md): lines, their points and speed zones, vehicles, drivers.

Loaded from JSON (or YAML) and validated with pydantic; every error names the entry and the field
that is wrong. Shared by ``frota check`` and the collector.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import date
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from protocols.records import VEHICLE_ID_PATTERN

SERVICES = ("rodoviario", "executivo", "leito", "suburbano", "semiurbano", "urbano")
POINT_KINDS = ("terminal", "secao", "parada", "apoio")

Service = Literal["rodoviario", "executivo", "leito", "suburbano", "semiurbano", "urbano"]
PointKind = Literal["terminal", "secao", "parada", "apoio"]
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class RegistryError(ValueError):
    """A registry that cannot be used; the message names the entry and what to fix."""


def _known(value: str, info: ValidationInfo) -> str:
    """A profile name the registry may use: a built-in profile, or an operator's copy loaded
    alongside (``Registry.from_dict(..., profiles=...)``)."""
    names = (info.context or {}).get("profiles")
    if names is None:
        # imported here: the rules package imports this module
        from collector.rules.profile import builtin_names

        names = builtin_names()
    if value not in names:
        raise ValueError(f"profile {value!r} is not one of {', '.join(names)}")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Point(_Model):
    """An approved point of a line (terminal, section, stop, support point)."""

    name: str = Field(min_length=1)
    kind: PointKind
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    radius_m: float = Field(default=150, gt=0)


class SpeedZone(_Model):
    """A circle where a lower signposted limit applies (CTB 61 §2)."""

    limit_kmh: float = Field(gt=0)
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    radius_m: float = Field(gt=0)


class Departure(_Model):
    """A scheduled departure: a local time (the line's profile's zone) on weekdays or dates."""

    time: str = Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")
    weekdays: tuple[Weekday, ...] = ()
    dates: tuple[date, ...] = ()

    def runs_on(self, day: date) -> bool:
        """Whether this departure is scheduled on a local day."""
        return day in self.dates or WEEKDAYS[day.weekday()] in self.weekdays


class Timetable(_Model):
    """What the operator promised the authority for a line: its departures, in force from
    ``valid_from`` (a local date; without it, from the first record) until ``valid_until``
    (exclusive), with the authority's service order (ordem de serviço) number."""

    service_order: str | None = None
    valid_from: date | None = None
    valid_until: date | None = None
    departures: tuple[Departure, ...] = Field(min_length=1)


class Line(_Model):
    """A line: its profile (the state regulation that judges it), service, length and limits."""

    id: str = Field(min_length=1)
    profile: str
    service: Service
    length_km: float = Field(gt=0)
    speed_limit_kmh: float | None = Field(default=None, gt=0)
    speed_zones: tuple[SpeedZone, ...] = ()
    points: tuple[Point, ...] = ()
    standing_allowed: bool | None = None
    timetable: Timetable | None = None
    #: The operator that runs the line: its timetable is judged with that operator's vehicles
    #: (collector/partitions.py); without one, with the vehicles that name no operator.
    operator: str | None = None

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str, info: ValidationInfo) -> str:
        return _known(value, info)


class Vehicle(_Model):
    """A bus: its plate, seats and capacity (seats plus allowed standing places)."""

    id: str = Field(pattern=VEHICLE_ID_PATTERN)
    seats: int = Field(gt=0)
    capacity: int | None = Field(default=None, gt=0)
    #: Who may see the vehicle through the API (an ``operador`` token of this operator).
    operator: str | None = None
    #: Its home profile: the time zone of its vehicle-days and of dates typed about it, and the
    #: profile of its records outside any trip (else ``--profile``, the collector's default).
    profile: str | None = None
    #: Year of manufacture (fleet age: SP 61 §1).
    manufactured: int | None = Field(default=None, ge=1900, le=2100)
    #: Dates of its annual inspections (vistorias: SP 62 §1, 64; BA 50).
    inspections: tuple[date, ...] = ()

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _known(value, info)

    @property
    def max_on_board(self) -> int:
        """Capacity, or the seats when no capacity is stated."""
        return self.capacity if self.capacity is not None else self.seats


class Driver(_Model):
    """A driver: the registry's id, name and the card the registrador reports."""

    id: str = Field(min_length=1)
    name: str = ""
    card: str | None = None


class _Document(_Model):
    lines: tuple[Line, ...] = ()
    vehicles: tuple[Vehicle, ...] = ()
    drivers: tuple[Driver, ...] = ()


def _where(doc: Any, loc: tuple[int | str, ...]) -> str:
    """A readable location for a pydantic error: ``lines[0] (id 'SP-1').points[2].lat``."""
    parts: list[str] = []
    node: Any = doc
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]"
            node = node[item] if isinstance(node, list) and item < len(node) else None
            if isinstance(node, dict) and isinstance(node.get("id") or node.get("name"), str):
                label = node.get("id") or node.get("name")
                parts[-1] = f"{parts[-1]} ({label!r})"
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(parts)


def _message(doc: Any, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    kind = first["type"]
    where = _where(doc, loc)
    if kind == "missing":
        field = loc[-1]
        owner = _where(doc, loc[:-1]) or "the registry"
        return f"{owner}: missing {field!r}"
    if kind == "extra_forbidden":
        return f"{where}: unknown field"
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{where}: {msg}{more}"


class Registry:
    """The validated registry with look-ups by id and card."""

    def __init__(self, lines: tuple[Line, ...], vehicles: tuple[Vehicle, ...],
                 drivers: tuple[Driver, ...]) -> None:
        self.lines: dict[str, Line] = {}
        self.vehicles: dict[str, Vehicle] = {}
        self.drivers: dict[str, Driver] = {}
        self._by_card: dict[str, str] = {}
        for line in lines:
            if line.id in self.lines:
                raise RegistryError(f"lines: duplicate id {line.id!r}")
            self.lines[line.id] = line
        for vehicle in vehicles:
            if vehicle.id in self.vehicles:
                raise RegistryError(f"vehicles: duplicate id {vehicle.id!r}")
            if vehicle.capacity is not None and vehicle.capacity < vehicle.seats:
                raise RegistryError(
                    f"vehicles ({vehicle.id!r}): capacity {vehicle.capacity} is below seats "
                    f"{vehicle.seats}"
                )
            self.vehicles[vehicle.id] = vehicle
        for driver in drivers:
            if driver.id in self.drivers:
                raise RegistryError(f"drivers: duplicate id {driver.id!r}")
            self.drivers[driver.id] = driver
            if driver.card is not None:
                if driver.card in self._by_card:
                    raise RegistryError(
                        f"drivers ({driver.id!r}): card {driver.card!r} is also the card of "
                        f"{self._by_card[driver.card]!r}"
                    )
                self._by_card[driver.card] = driver.id

    @classmethod
    def from_dict(cls, doc: Any, profiles: Iterable[str] | None = None) -> Registry:
        """Validate a parsed registry document; RegistryError names what is wrong.
        ``profiles``: the profile names lines may use (default: the built-in profiles)."""
        if not isinstance(doc, Mapping):
            raise RegistryError("the registry is an object with lines, vehicles and drivers")
        context = None if profiles is None else {"profiles": tuple(profiles)}
        try:
            parsed = _Document.model_validate(doc, context=context)
        except ValidationError as err:
            raise RegistryError(_message(doc, err)) from None
        return cls(parsed.lines, parsed.vehicles, parsed.drivers)

    def line(self, line_id: str) -> Line:
        """The line with this id; RegistryError('unknown line …') if there is none."""
        try:
            return self.lines[line_id]
        except KeyError:
            raise RegistryError(f"unknown line {line_id!r} (not in the registry)") from None

    def driver_id(self, card_or_id: str) -> str:
        """The registry's driver id for a card number or driver id (unknown ones pass through)."""
        if card_or_id in self.drivers:
            return card_or_id
        return self._by_card.get(card_or_id, card_or_id)


def load(path: str | Path, profiles: Iterable[str] | None = None) -> Registry:
    """Read and validate a registry file (JSON, or YAML for .yaml/.yml); ``profiles`` as in
    :meth:`Registry.from_dict`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise RegistryError(f"cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise RegistryError(f"{path} is not UTF-8 text") from None
    try:
        doc = yaml.safe_load(text) if path.suffix.lower() in (".yaml", ".yml") else json.loads(text)
    except json.JSONDecodeError as err:
        raise RegistryError(f"{path}: not JSON: {err.msg} at line {err.lineno}") from None
    except yaml.YAMLError as err:
        raise RegistryError(f"{path}: not YAML: {str(err).splitlines()[0]}") from None
    try:
        return Registry.from_dict(doc, profiles)
    except RegistryError as err:
        raise RegistryError(f"{path}: {err}") from None
