"""``frota collector rejects replay``: the stored rejects whose cause is fixed, ingested again
(docs/collector.md, "Rejects replayed").

Each kept payload (``rejects.payload``; not those emptied to keep ``database.rejects_max_mb``) is
read again exactly as the ingest reads a payload from MQTT (:func:`collector.intake.prepare`,
with the registry as it is now and the payload's original arrival time):

- accepted now (the vehicle is in the registry since) — its valid records are stored through the same
  transaction as a live batch (chain links and checkpoint included), and the row is marked
  ``replayed_ms``/``replay = 'stored N'``: it is never replayed again. The records' identities
  make a second arrival (the agent sending them again itself) a duplicate, so each record is in
  the store once whichever comes first;
- still refused for a cause that may change (``retryable``: an unknown vehicle, a newer payload
  schema) — left as it is, for a later replay;
- refused for a cause that cannot change (a malformed payload, one record refused for its
  content, a conflict) — marked ``replay = 'final: …'`` and never tried again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from collector.intake import prepare
from collector.store import Store
from protocols.uplink import MAX_PAYLOAD_BYTES

#: Reject rows read at a time.
PAGE: Final = 100


@dataclass
class ReplayReport:
    """What a replay did."""

    stored_records: int = 0
    duplicates: int = 0
    replayed: int = 0
    still_retryable: int = 0
    final: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


def replay(store: Store, known_vehicles: Callable[[], frozenset[str]], now_ms: int, *,
           vehicle: str | None = None, dry_run: bool = False,
           max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> ReplayReport:
    """Re-ingest the stored rejects not replayed yet (of ``vehicle``); see the module docstring."""
    report = ReplayReport()
    after = 0
    while True:
        sql = ("SELECT id, topic, received_ms, payload FROM rejects WHERE id > ? "
               "AND replayed_ms IS NULL AND dropped_bytes = 0")
        params: tuple[object, ...] = (after,)
        if vehicle is not None:
            sql += " AND vehicle = ?"
            params += (vehicle,)
        page = store._read(sql + " ORDER BY id LIMIT ?", (*params, PAGE))
        for row_id, topic, received_ms, payload in page:
            after = int(row_id)
            _one(store, report, after, str(topic), int(received_ms), bytes(payload),
                 known_vehicles, now_ms, dry_run, max_payload_bytes)
        if len(page) < PAGE:
            return report


def _one(store: Store, report: ReplayReport, row_id: int, topic: str, received_ms: int,
         payload: bytes, known: Callable[[], frozenset[str]], now_ms: int, dry_run: bool,
         max_payload_bytes: int) -> None:
    prepared = prepare(topic, payload, known, received_ms, max_payload_bytes)
    if prepared.whole_payload_rejected:
        ack = prepared.ack
        reason = prepared.rejects[0].reason if prepared.rejects else "refused"
        report.reasons[reason] = report.reasons.get(reason, 0) + 1
        if ack is not None and ack.retryable and all(ack.retryable):
            report.still_retryable += 1
            return
        report.final += 1
        if not dry_run:
            _mark(store, row_id, now_ms, f"final: {reason}"[:300])
        return
    report.replayed += 1
    if dry_run:
        report.stored_records += len(prepared.rows)
        return
    # Records refused one by one inside a batch now accepted stay in this row's payload (no new
    # reject rows: a later replay would read them as batches); the row says how many.
    new = store.put_many([(prepared.rows, [], prepared.state_rows)], [prepared.chain])[0]
    refused = sum(1 for link in (prepared.chain.links if prepared.chain else ())
                  if link[3] == "rejected")
    what = f"stored {new}" + (f", {refused} refused for their content (final)" if refused else "")
    _mark(store, row_id, now_ms, what)
    report.stored_records += new
    report.duplicates += len(prepared.rows) - new


def _mark(store: Store, row_id: int, now_ms: int, what: str) -> None:
    store.apply([("UPDATE rejects SET replayed_ms = ?, replay = ? WHERE id = ?",
                  [(now_ms, what, row_id)])])
