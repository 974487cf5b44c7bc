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
from collections.abc import Mapping
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


def snapshot(engine: LiveEngine) -> bytes:
    """The engine's state after what it processed (queued records and closed findings left out)."""
    refs = _shared(engine)
    protocol = pickle.HIGHEST_PROTOCOL

    def reduce(obj: Any) -> Any:
        ref = refs.get(id(obj))
        if ref is not None:
            return _ref, (ref,)
        return obj.__reduce_ex__(protocol)     # an object of that class, not the shared one

    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=protocol)
    pickler.dispatch_table = {**copyreg.dispatch_table, **dict.fromkeys(_SHARED_TYPES, reduce)}
    pickler.dump((
        STATE_VERSION, engine.vehicles, engine.drivers, engine.trips, engine.pipeline.rules,
        engine._done_ms, engine.latest_ms, engine._arrivals,
    ))
    return out.getvalue()


def restore(blob: bytes, registry: Registry, profiles: dict[str, Profile],
            default_profile: str = "SP") -> LiveEngine:
    """A new engine in the state :func:`snapshot` saved."""
    engine = LiveEngine(registry, profiles, default_profile)
    _restoring.engine = engine
    try:
        state = pickle.loads(blob)
    except CheckpointError:
        raise
    except Exception as err:  # a damaged blob can raise almost anything from pickle
        raise CheckpointError(f"checkpoint unreadable: {err}") from err
    finally:
        _restoring.engine = None
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
