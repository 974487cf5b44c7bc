"""Closing an open deadline from the *Ocorrências* page: a ``report`` answering the finding,
entered through :func:`collector.entries.enter` (the path of ``frota collector enter report``)."""

from __future__ import annotations

from collector.entries import EntryError, EntrySeal, enter
from collector.tokens import Token
from collector.web.context import Filters, NotFoundError, Web
from protocols.records import Record, ms_to_ts

__all__ = ["EntryError", "close_deadline"]


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
    # The entering user is the API token (its id, and its operator for an operador token).
    by = f"token {user.id}" + (f" ({user.operator})" if user.operator else "")
    seal = None if web.signer is None else EntrySeal(web.signer.key_id, web.signer.sign)
    return enter(web.store, web.registry(), rec, now_ms, by[:64], seal)
