"""An operator's entry (``incident`` or ``report``) stored like any record, with ``agent:
"operator"`` and the collector's next ``seq``: the one path of ``frota collector enter`` and of
the pages' *Ocorrências* form."""

from __future__ import annotations

from typing import Any

from collector.registry import Registry
from collector.store import Store
from protocols.records import Record, RecordError, validate


class EntryError(ValueError):
    """An entry that cannot be stored; the message says why (one line)."""


def enter(store: Store, registry: Registry | None, rec: dict[str, Any], received_ms: int) -> Record:
    """Validate and store an operator's record; return it as stored."""
    try:
        validate(rec)
    except RecordError as err:
        raise EntryError(str(err)) from None
    if registry is not None and rec["vehicle"] not in registry.vehicles:
        raise EntryError(f"vehicle {rec['vehicle']!r} is not in the fleet registry")
    return store.append(rec["vehicle"], "operator", rec, received_ms)
