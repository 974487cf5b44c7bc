"""Legal holds: a vehicle's period that no prune deletes (an accident, a lawsuit, an inspector's
request) until the hold is released. Each hold keeps who made it and when, and who released it
and when; a released hold stays listed (docs/collector.md, "Legal holds")."""

from __future__ import annotations

from dataclasses import dataclass

from collector.store import Store


class HoldError(ValueError):
    """A hold that cannot be made or released; the message says why."""


@dataclass(frozen=True)
class Hold:
    """One legal hold."""

    id: int
    vehicle: str
    since_ms: int
    until_ms: int
    reason: str
    made_by: str
    made_ms: int
    released_by: str | None
    released_ms: int | None

    @property
    def active(self) -> bool:
        """True until released."""
        return self.released_ms is None


_COLUMNS = ("id, vehicle, since_ms, until_ms, reason, made_by, made_ms, released_by, "
            "released_ms")


def add(store: Store, vehicle: str, since_ms: int, until_ms: int, reason: str, by: str,
        now_ms: int) -> Hold:
    """Record a hold of ``vehicle`` over since <= ts < until; the hold as stored."""
    if until_ms <= since_ms:
        raise HoldError("--until must be after --since")
    if not reason.strip():
        raise HoldError("--reason must say why the period is held")
    store.apply([(
        "INSERT INTO holds (vehicle, since_ms, until_ms, reason, made_by, made_ms) "
        "VALUES (?, ?, ?, ?, ?, ?)", [(vehicle, since_ms, until_ms, reason.strip(), by, now_ms)])])
    rows = store._read(f"SELECT {_COLUMNS} FROM holds WHERE vehicle = ? AND made_ms = ? "
                       "ORDER BY id DESC LIMIT 1", (vehicle, now_ms))
    return _hold(rows[0])


def release(store: Store, hold_id: int, by: str, now_ms: int) -> Hold:
    """Release a hold (it stays listed, with who released it and when)."""
    found = store._read(f"SELECT {_COLUMNS} FROM holds WHERE id = ?", (hold_id,))
    if not found:
        raise HoldError(f"no hold {hold_id} (frota collector hold list shows them)")
    if found[0][8] is not None:
        raise HoldError(f"hold {hold_id} was already released by {found[0][7]}")
    store.apply([("UPDATE holds SET released_by = ?, released_ms = ? WHERE id = ? "
                  "AND released_ms IS NULL", [(by, now_ms, hold_id)])])
    return _hold(store._read(f"SELECT {_COLUMNS} FROM holds WHERE id = ?", (hold_id,))[0])


def listed(store: Store, include_released: bool = True) -> list[Hold]:
    """Every hold, oldest first."""
    rows = store._read(f"SELECT {_COLUMNS} FROM holds ORDER BY id")
    holds = [_hold(row) for row in rows]
    return holds if include_released else [h for h in holds if h.active]


def _hold(row: tuple[object, ...]) -> Hold:
    i, vehicle, since, until, reason, by, made, rby, rms = row
    return Hold(int(str(i)), str(vehicle), int(str(since)), int(str(until)), str(reason),
                str(by), int(str(made)), None if rby is None else str(rby),
                None if rms is None else int(str(rms)))
