"""The live rules' engine state, saved and restored (checkpoints, docs/collector.md "Live findings").

A checkpoint is the state of a :class:`LiveEngine` after it processed every record of its partition
with ``ts`` before the checkpoint's *boundary* and none after: the vehicles, running trips,
drivers and every rule's own state — not the findings already closed (they are in the
``findings`` table) and not the records still queued (they are read again from the store).

It is a pickle: the rules keep arbitrary Python state (dataclasses, dicts, sets, heaps) and
pickle is the one serializer of the standard library that keeps object identity between them (a
rule's state and the engine's vehicles point at the same objects). What is shared with the
running collector and never belongs in a checkpoint — the rule context, the registry and its
entries, the profiles — is written as a reference (a reducer of their classes, :func:`_ref`)
and bound again to the restoring engine's own objects. Checkpoints are the collector's own data in its own database,
as trusted as the records beside them; one that cannot be read is dropped and its partition
replayed from an earlier one (:func:`restore` raises :class:`CheckpointError`).
"""

from __future__ import annotations

import copyreg
import hashlib
import io
import pickle
import threading
from collections.abc import Collection, Mapping
from typing import Any

from collector import registry as registry_model
from collector.registry import Registry
from collector.rules.engine import Engine
from collector.rules.finding import Finding
from collector.rules.pipeline import RULES
from collector.rules.profile import Profile
from collector.rules.rule import RuleContext
from protocols.records import Record

#: Bumped when what a checkpoint holds changes: checkpoints of another version are dropped.
STATE_VERSION = 3


class CheckpointError(Exception):
    """A checkpoint that cannot be restored (another version, or damaged)."""


class LiveEngine(Engine):
    """The engine of the live rules: remembers, for each closed finding, the time (``ts`` ms of
    the record being processed) at which it was last kept — a replay from a boundary redoes
    exactly the findings kept at or after it."""

    def __init__(self, registry: Registry, profiles: dict[str, Profile],
                 default_profile: str = "SP") -> None:
        self.at_ms = 0
        self.kept_at: dict[str, int] = {}
        super().__init__(registry, profiles, default_profile, retain=False)

    def _process(self, ms: int, rec: Record) -> None:
        self.at_ms = ms
        super()._process(ms, rec)

    def _keep(self, finding: Finding) -> None:
        super()._keep(finding)
        if finding["id"] in self.closed:
            self.kept_at[finding["id"]] = self.at_ms


def _shared(engine: Engine) -> dict[int, str]:
    """The objects a checkpoint refers to instead of holding: id(object) -> reference."""
    reg = engine.registry
    refs: dict[int, str] = {id(engine.context): "ctx", id(reg): "registry"}
    refs.update({id(p): f"profile:{name}" for name, p in engine.profiles.items()})
    refs.update({id(x): f"line:{k}" for k, x in reg.lines.items()})
    refs.update({id(x): f"vehicle:{k}" for k, x in reg.vehicles.items()})
    refs.update({id(x): f"driver:{k}" for k, x in reg.drivers.items()})
    return refs


#: The classes of the shared objects (:func:`_shared`): only their instances are looked up when
#: a checkpoint is written (a reducer in the pickler's dispatch table, called by the C pickler
#: for these classes alone — a ``persistent_id`` would be a Python call for every object of the
#: state, more than half of the time of a snapshot of a large partition).
_SHARED_TYPES: tuple[type, ...] = (RuleContext, Registry, Profile, registry_model.Line,
                                   registry_model.Vehicle, registry_model.Driver)

#: The engine a checkpoint is being restored into (per thread), for :func:`_ref`.
_restoring = threading.local()


def _ref(ref: str) -> Any:
    """A shared object named in a checkpoint, bound again to the restoring engine's own."""
    engine: Engine | None = getattr(_restoring, "engine", None)
    if engine is None:
        raise CheckpointError("a checkpoint reference read outside restore()")
    return _resolve(engine, ref)


def _resolve(engine: Engine, ref: str) -> Any:
    kind, _, key = ref.partition(":")
    if kind == "ctx":
        return engine.context
    if kind == "registry":
        return engine.registry
    tables: dict[str, Mapping[str, Any]] = {
        "profile": engine.profiles, "line": engine.registry.lines,
        "vehicle": engine.registry.vehicles, "driver": engine.registry.drivers,
    }
    table = tables.get(kind, {})
    if key not in table:
        raise CheckpointError(f"checkpoint refers to {ref}, which is not known any more")
    return table[key]


def snapshot(engine: LiveEngine, same: Mapping[int, str] | None = None) -> bytes:
    """The engine's state after what it processed (queued records and closed findings left out).
    ``same``: id(object) -> key of objects written as a reference to themselves (:func:`fork`)."""
    refs = _shared(engine)
    protocol = pickle.HIGHEST_PROTOCOL

    def reduce(obj: Any) -> Any:
        ref = refs.get(id(obj))
        if ref is not None:
            return _ref, (ref,)
        if same is not None:
            key = same.get(id(obj))
            if key is not None:
                return _same, (key,)
        return obj.__reduce_ex__(protocol)     # an object of that class, not the shared one

    types = set(_SHARED_TYPES)
    if same is not None:
        types.update(_same_types(engine))
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=protocol)
    pickler.dispatch_table = {**copyreg.dispatch_table, **dict.fromkeys(types, reduce)}
    pickler.dump((
        STATE_VERSION, engine.vehicles, engine.drivers, engine.trips, engine.pipeline.rules,
        engine._done_ms, engine.latest_ms, engine._arrivals,
    ))
    return out.getvalue()


def _tables(engine: Engine) -> list[dict[str, Any]]:
    """The tables of each vehicle's own state: the engine's vehicles and the rules' declared
    ``vehicle_tables``."""
    tables: list[dict[str, Any]] = [engine.vehicles]
    for rule in engine.pipeline.rules:
        tables += [getattr(rule, name) for name in type(rule).vehicle_tables]
    return tables


def _same_types(engine: Engine) -> set[type]:
    # the classes of the tables' entries (the C pickler looks a dispatch table up for other
    # classes than its built-in ones only: an entry that is a dict or a list is copied)
    return {type(obj) for table in _tables(engine) for obj in table.values()}


def _same(key: str) -> Any:
    """An object of the engine :func:`fork` copies, itself (not a copy)."""
    table: Mapping[str, Any] | None = getattr(_restoring, "same", None)
    if table is None or key not in table:
        raise CheckpointError(f"a fork's reference {key} read outside fork()")
    return table[key]


def fork(engine: LiveEngine, own: Collection[str], profiles: dict[str, Profile],
         default_profile: str = "SP") -> LiveEngine:
    """A copy of the engine to judge records of the vehicles ``own`` alone (speed and position
    records): those vehicles' entries in the vehicle tables (:func:`_tables`) are copied with
    the rest of the state, every other vehicle's entries are the engine's very objects, shared —
    the hooks those records call change no other vehicle's entry (``RuleBase.vehicle_tables``),
    so the engine is left as it was. Costs the copy of ``own``'s entries, not the partition's."""
    same: dict[int, str] = {}
    objects: dict[str, Any] = {}
    for n, table in enumerate(_tables(engine)):
        for vehicle, obj in table.items():
            if vehicle not in own:
                key = f"{n}:{vehicle}"
                same[id(obj)] = key
                objects[key] = obj
    blob = snapshot(engine, same)
    return restore(blob, engine.registry, profiles, default_profile, objects)


def restore(blob: bytes, registry: Registry, profiles: dict[str, Profile],
            default_profile: str = "SP", same: Mapping[str, Any] | None = None) -> LiveEngine:
    """A new engine in the state :func:`snapshot` saved (``same``: :func:`fork`'s objects)."""
    engine = LiveEngine(registry, profiles, default_profile)
    _restoring.engine = engine
    _restoring.same = same
    try:
        state = pickle.loads(blob)
    except CheckpointError:
        raise
    except Exception as err:  # a damaged blob can raise almost anything from pickle
        raise CheckpointError(f"checkpoint unreadable: {err}") from err
    finally:
        _restoring.engine = None
        _restoring.same = None
    if not (isinstance(state, tuple) and len(state) == 8 and state[0] == STATE_VERSION):
        raise CheckpointError("checkpoint of another version")
    _, vehicles, drivers, trips, rules, done_ms, latest_ms, arrivals = state
    # the context's read-only views wrap these very dicts: fill them in place
    engine.vehicles.update(vehicles)
    engine.drivers.update(drivers)
    engine.trips.update(trips)
    engine.pipeline = type(engine.pipeline)(engine.rule_types, engine.context, list(rules))
    engine._bind()
    engine._done_ms, engine.latest_ms, engine._arrivals = done_ms, latest_ms, arrivals
    return engine


def fingerprint(registry_bytes: bytes, profiles: Mapping[str, Profile], default: str) -> int:
    """What the checkpoints were made with (registry, profiles, rules, state version) as a
    63-bit number: when it changes, every checkpoint is dropped and the store replayed once."""
    text = repr((STATE_VERSION, default, sorted(profiles.items()),
                 [f"{r.__module__}.{r.__qualname__}" for r in RULES]))
    digest = hashlib.sha256(registry_bytes + b"\0" + text.encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1
