"""The seam every rule plugs into: the :class:`Rule` protocol and the read-only :class:`RuleContext`.

A rule is a class in a module of ``collector/rules/checks/`` (the pipeline finds it there, see
``collector/rules/pipeline.py``). The engine makes one instance per evaluation, passing it a
:class:`RuleContext`; the instance keeps its own state (per vehicle, trip or driver, as it needs)
and the engine calls the hooks it overrides, in pipeline order, with records in (``ts``, ``seq``)
order:

- ``on_vehicle`` — a vehicle's first record;
- ``on_record`` — a ``trip`` (before the engine starts or ends the trip), ``door``, ``incident``,
  ``report`` or ``device`` record;
- ``on_position`` — a GPS fix (``gps_kmh`` None when it carries no speed);
- ``on_sample`` — a speed sample (the registrador's, or the GPS speed while it is silent). The hot
  path: with ``samples = "all"`` every sample, with ``samples = "hot"`` only those of the vehicles
  in the rule's own ``hot`` set (e.g. a door open), with ``"none"`` never;
- ``on_change`` — after the vehicle started or stopped moving, a slot changed, or a trip started
  or ended (``v`` already shows the new state);
- ``on_trip_start`` / ``on_trip_leave`` / ``on_trip_end`` — a trip began, its vehicle handed it to
  a replacement (the trip goes on), or it ended;
- ``on_segment`` — an interval ``[s, e)`` of one effective activity of a driver, across vehicles;
- ``open`` — the findings still running at ``as_of``, computed without changing any state.

Hooks return a finding, a list of findings, or None. Whether a rule *applies* under a profile is
decided once, by the engine, on every finding (a finding of a rule with ``applies = false`` in the
finding's profile is dropped); rules never look at ``applies``.

The rule declares ``params``: each rule id it reports (a ``[rules."<id>"]`` section in every
profile) with the frozen dataclass of its parameters — ``ids`` follows from it —, and ``order``
(its place in the pipeline: lower first; rules do not share state, so the order only makes the
run deterministic).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from collector.registry import Registry
from collector.rules.context import Ctx, Whereabouts
from collector.rules.finding import Finding
from collector.rules.profile import Profile

if TYPE_CHECKING:
    from collector.rules.context import DriverState, Trip, Vehicle
    from protocols.records import Record

__all__ = ["Ctx", "Found", "Rule", "RuleBase", "RuleContext", "Whereabouts"]

#: What a hook gives back.
Found = Finding | list[Finding] | None


@dataclass(frozen=True)
class RuleContext:
    """What a rule may read, and nothing it may change: the registry, the profiles, and live views
    of the engine's vehicles, running trips and drivers (read them, never write them)."""

    registry: Registry
    profiles: Mapping[str, Profile]
    default: Profile
    vehicles: Mapping[str, Vehicle]
    trips: Mapping[str, Trip]
    drivers: Mapping[str, DriverState]


class Rule(Protocol):
    """One rule (or a family of rules sharing a state) in the pipeline."""

    ids: ClassVar[tuple[str, ...]]
    params: ClassVar[tuple[tuple[str, type], ...]]
    order: ClassVar[int]
    samples: ClassVar[Literal["all", "hot", "none"]]
    #: attributes mapping a vehicle id to that vehicle's own state (docs/rules.md)
    vehicle_tables: ClassVar[tuple[str, ...]]
    #: with ``samples = "hot"``: the vehicles whose samples the rule wants now
    hot: set[str]

    def on_vehicle(self, v: Vehicle, ms: int) -> None: ...
    def on_record(self, v: Vehicle, ms: int, rec: Record) -> Found: ...
    def on_position(self, v: Vehicle, ms: int, gps_kmh: float | None) -> Found: ...
    def on_sample(self, v: Vehicle, ms: int, kmh: float) -> Found: ...
    def on_change(self, v: Vehicle, ms: int) -> Found: ...
    def on_trip_start(self, trip: Trip, v: Vehicle, ms: int) -> Found: ...
    def on_trip_leave(self, trip: Trip, v: Vehicle, ms: int) -> Found: ...
    def on_trip_end(self, trip: Trip, v: Vehicle, ms: int) -> Found: ...
    def on_segment(self, driver: str, s: int, e: int, act: str, where: Whereabouts) -> Found: ...
    def open(self, as_of: int) -> Iterable[Finding | None]: ...


#: The hooks, in the order the engine may call them; the pipeline lists, for each, the rules
#: that override it.
HOOKS = ("on_vehicle", "on_record", "on_position", "on_sample", "on_change", "on_trip_start",
         "on_trip_leave", "on_trip_end", "on_segment", "open")


class RuleBase:
    """A rule that does nothing: subclass it and override the hooks you need."""

    #: (rule id, dataclass of its parameters) for each rule id this rule reports
    params: ClassVar[tuple[tuple[str, type], ...]] = ()
    #: the rule ids, from ``params``
    ids: ClassVar[tuple[str, ...]] = ()
    order: ClassVar[int] = 1000
    samples: ClassVar[Literal["all", "hot", "none"]] = "none"
    #: the attributes that are dicts from a vehicle id to that vehicle's own state: whatever is
    #: reachable from an entry belongs to that entry alone (or never changes), and the hooks
    #: called for a vehicle's speed and position records change no other vehicle's entry. The
    #: live rules then judge a few vehicles' records on a copy of their entries only, the others
    #: shared with the engine they copy (collector/live_state.py, :func:`fork`)
    vehicle_tables: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.ids = tuple(rule_id for rule_id, _ in cls.params)

    def __init__(self, ctx: RuleContext) -> None:
        self.ctx = ctx
        self.hot: set[str] = set()

    def on_vehicle(self, v: Vehicle, ms: int) -> None:
        """A vehicle's first record."""

    def on_record(self, v: Vehicle, ms: int, rec: Record) -> Found:
        """A trip, door, incident, report or device record."""
        return None

    def on_position(self, v: Vehicle, ms: int, gps_kmh: float | None) -> Found:
        """A GPS fix (``v.lat``/``v.lon`` already at it), with its speed when it has one."""
        return None

    def on_sample(self, v: Vehicle, ms: int, kmh: float) -> Found:
        """A speed sample (``v.kmh`` is already ``kmh``)."""
        return None

    def on_change(self, v: Vehicle, ms: int) -> Found:
        """Moving, a slot or the trip changed."""
        return None

    def on_trip_start(self, trip: Trip, v: Vehicle, ms: int) -> Found:
        """A new trip began on ``v``."""
        return None

    def on_trip_leave(self, trip: Trip, v: Vehicle, ms: int) -> Found:
        """``v`` handed ``trip`` to a replacement vehicle (the trip goes on)."""
        return None

    def on_trip_end(self, trip: Trip, v: Vehicle, ms: int) -> Found:
        """``trip`` ended on ``v``."""
        return None

    def on_segment(self, driver: str, s: int, e: int, act: str, where: Whereabouts) -> Found:
        """One interval of one effective activity of a driver; ``where.at(ms)`` is the vehicle,
        trip, line and profile the driver was in at ``ms``."""
        return None

    def open(self, as_of: int) -> Iterable[Finding | None]:
        """Findings still running at ``as_of`` (no state changes)."""
        return ()


if TYPE_CHECKING:   # mypy checks that the base class follows the protocol
    _BASE_IS_A_RULE: type[Rule] = RuleBase
