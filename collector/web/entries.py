"""Closing an open deadline from the *Ocorrências* page: a ``report`` answering the finding,
entered through :func:`collector.entries.enter` (the path of ``frota collector enter report``);
withdrawing an operator entry from the *Disco do dia* (:func:`collector.entries.withdraw`, the
path of ``frota collector enter withdrawal``)."""

from __future__ import annotations

from collector.entries import EntryError, EntrySeal, enter, entry_of, withdraw
from collector.tokens import Token
from collector.web.context import Filters, NotFoundError, Web
from protocols.records import Record, ms_to_ts

__all__ = ["EntryError", "close_deadline", "withdraw_entry"]


def close_deadline(web: Web, user: Token, finding_id: str, to: str, now_ms: int) -> Record:
    """Store a report answering the open deadline ``finding_id`` (NotFoundError for a finding the
    user cannot see, EntryError for one that is not an open deadline)."""
    found, _ = web.findings(user, Filters())
    match = next((f for f in found if f["id"] == finding_id), None)
    if match is None or match.get("vehicle") is None:
        raise NotFoundError(f"unknown finding {finding_id!r}")
    if match["severity"] != "deadline" or match.get("end") is not None:
        raise EntryError(f"finding {finding_id!r} is not an open deadline")
    if not to:
        raise EntryError("to: say who it was reported to (or 'passengers')")
    rec = {"vehicle": match["vehicle"], "ts": ms_to_ts(now_ms), "kind": "report",
           "finding": finding_id, "to": to}
    return enter(web.store, web.registry(), rec, now_ms, _by(user), _seal(web))


def _by(user: Token) -> str:
    """The entering user: the API token (its id, and its operator for an operador token)."""
    return (f"token {user.id}" + (f" ({user.operator})" if user.operator else ""))[:64]


def _seal(web: Web) -> EntrySeal | None:
    return None if web.signer is None else EntrySeal(web.signer.key_id, web.signer.sign)


def withdraw_entry(web: Web, user: Token, vehicle: str, seq: int, reason: str,
                   now_ms: int) -> Record:
    """Withdraw the vehicle's operator entry ``seq`` (NotFoundError for a vehicle the user cannot
    see or an entry it does not have, EntryError for one that cannot be withdrawn)."""
    web.check_vehicle(user, vehicle)
    if not reason.strip():
        raise EntryError("reason: say why the entry is withdrawn")
    if entry_of(web.store, vehicle, seq) is None:
        raise NotFoundError(f"vehicle {vehicle!r} has no operator entry {seq}")
    return withdraw(web.store, web.registry(), vehicle, seq, reason, now_ms, _by(user), _seal(web))
