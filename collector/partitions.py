"""Partitions: the sets of vehicles the rules judge together, one per operator (docs/rules.md,
"Operators: one judgment per operator").

The registry's ``vehicles[].operator`` groups the fleet: every vehicle of one operator is in the
partition ``operator:NAME``; vehicles without an operator (and vehicles missing from the registry)
share the partition ``fleet``. A registry that names no operator is one partition, ``fleet``,
judged exactly as before.

Each partition is judged by its own engine on a *view* of the registry: all the lines (a trip may
run any line), only the partition's vehicles (``fleet.age`` judges an operator's fleet), the
timetable only on the lines whose ``lines[].operator`` is the partition's (lines without one: the
``fleet`` partition), and every driver — but a driver is followed only across the vehicles of the
partition: a driver who drives for two operators is judged separately by each (each finding is
built from one operator's records, so it can be shown to that operator alone).

:class:`PartitionedEngine` is what ``frota check`` and the whole-store evaluation run: one engine
per partition behind the engine's own interface (``add_one``, ``flush``, ``findings``), so that
``frota check --as-of`` and the collector's live findings (collector/live_rules.py) judge the
same way.
"""

from __future__ import annotations

from typing import Final

from collector.registry import Registry
from collector.rules.engine import Engine
from collector.rules.finding import Finding, sort_key
from collector.rules.profile import Profile
from protocols.records import Record

#: The partition of vehicles without an operator (and of vehicles missing from the registry).
FLEET: Final = "fleet"
#: The prefix of an operator's partition.
OPERATOR_PREFIX: Final = "operator:"


def partition_of(vehicle: str, registry: Registry) -> str:
    """The partition of a vehicle: its operator's, else ``fleet``."""
    known = registry.vehicles.get(vehicle)
    if known is None or not known.operator:
        return FLEET
    return OPERATOR_PREFIX + known.operator


def operator_of(part: str) -> str | None:
    """The operator of a partition (None: ``fleet``)."""
    return part.removeprefix(OPERATOR_PREFIX) if part.startswith(OPERATOR_PREFIX) else None


_NAMES: dict[int, tuple[Registry, list[str]]] = {}


def partition_names(registry: Registry) -> list[str]:
    """Every partition the registry makes, ``fleet`` always among them, sorted (made once per
    registry: the live rules ask at every evaluation)."""
    cached = _NAMES.get(id(registry))
    if cached is not None and cached[0] is registry:
        return list(cached[1])
    names = sorted({FLEET} | {partition_of(v, registry) for v in registry.vehicles})
    _NAMES[id(registry)] = (registry, names)
    return list(names)


def _named(registry: Registry) -> bool:
    return any(v.operator for v in registry.vehicles.values()) or any(
        line.operator for line in registry.lines.values())


_VIEWS: dict[tuple[int, str], tuple[Registry, Registry]] = {}


def partition_registry(registry: Registry, part: str) -> Registry:
    """The registry as the partition's engine sees it (see the module docstring); the registry
    itself when it names no operator. The same object for the same (registry, partition)."""
    if not _named(registry):
        return registry
    key = (id(registry), part)
    cached = _VIEWS.get(key)
    if cached is not None and cached[0] is registry:
        return cached[1]
    operator = operator_of(part)
    lines = tuple(line if (line.operator or None) == operator or line.timetable is None
                  else line.model_copy(update={"timetable": None})
                  for line in registry.lines.values())
    vehicles = tuple(v for v in registry.vehicles.values() if (v.operator or None) == operator)
    view = Registry(lines, vehicles, tuple(registry.drivers.values()))
    _VIEWS[key] = (registry, view)
    return view


class PartitionedEngine:
    """One :class:`Engine` per partition, fed and asked as one engine (``frota check``)."""

    def __init__(self, registry: Registry, profiles: dict[str, Profile],
                 default_profile: str = "SP") -> None:
        self.registry = registry
        self.profiles = profiles
        self.default = default_profile
        self.engines: dict[str, Engine] = {}

    def engine(self, part: str) -> Engine:
        """The partition's engine (made when first needed)."""
        found = self.engines.get(part)
        if found is None:
            found = Engine(partition_registry(self.registry, part), self.profiles, self.default,
                           retain=False)
            self.engines[part] = found
        return found

    def add_one(self, ms: int, rec: Record) -> None:
        """Queue one record with its ``ts`` in ms, in its vehicle's partition."""
        self.engine(partition_of(rec["vehicle"], self.registry)).add_one(ms, rec)

    def flush(self, final: bool = False) -> None:
        """Flush every partition's engine (Engine.flush)."""
        for engine in self.engines.values():
            engine.flush(final)

    def findings(self, as_of_ms: int | None = None) -> list[Finding]:
        """Every partition's findings in docs/records.md's order. Only the partitions with
        records are judged (as live), ``fleet`` when there are none at all."""
        if not self.engines:
            self.engine(FLEET)
        out: list[Finding] = []
        for engine in self.engines.values():
            out += engine.findings(as_of_ms)
        return sorted(out, key=sort_key)
