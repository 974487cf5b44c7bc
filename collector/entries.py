"""An operator's entry (``incident``, ``report`` or ``trip``) stored like any record, with
``agent: "operator"``, the collector's next ``seq``, ``by`` (the user who entered it) and ``prev``
(the chain of that vehicle's operator entries), and signed by the collector (``docs/trust.md``):
the one path of ``frota collector enter``, of the pages' *Ocorrências* form and of the demo.

Each entry gets, in the same transaction, its chain hash in its row (as the ingest stores a
record, collector/store_chain.py) and a checkpoint signed with the collector's key certified by the fleet CA, so ``frota verify`` finds an
entry edited, deleted or inserted in the store as it does an agent's record. An entry is never
edited in place: a correction is another entry.
"""

from __future__ import annotations

import base64
import getpass
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from collector.registry import Registry
from collector.store import INSERT_RECORD, Store, record_row
from collector.store_chain import INSERT_CHECKPOINT, received_hash
from protocols.chain import GENESIS, checkpoint_message, record_hash, try_hash
from protocols.records import (
    MAX_REASON_CHARS,
    Record,
    RecordError,
    ms_to_ts,
    ts_to_ms,
    validate,
)

OPERATOR: Final = "operator"
#: Longest ``by`` (the entering user's name) accepted.
MAX_BY_CHARS: Final = 64


class EntryError(ValueError):
    """An entry that cannot be stored; the message says why (one line)."""


@dataclass(frozen=True)
class EntrySeal:
    """The collector's signing key: its key id (certified by the fleet CA as a ``collector``)
    and a function signing bytes with it."""

    key_id: str
    sign: Callable[[bytes], bytes]


def os_user() -> str:
    """The OS user running this process (``--by``'s default)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name, no passwd entry (a container)
        return f"uid {os.getuid()}"


def check_by(by: str) -> str:
    """``by`` if it names a user (1–64 printable characters), EntryError otherwise."""
    if not isinstance(by, str) or not 1 <= len(by) <= MAX_BY_CHARS or not by.isprintable() \
            or by != by.strip():
        raise EntryError(f"by {by[:MAX_BY_CHARS]!r}: give the user who entered it "
                         f"(1-{MAX_BY_CHARS} printable characters)")
    return by


def enter(store: Store, registry: Registry | None, rec: dict[str, Any], received_ms: int,
          by: str, seal: EntrySeal | None) -> Record:
    """Validate, chain, sign and store an operator's record; return it as stored. ``seal`` None
    (a store opened without the collector's key) stores it chained but unsigned: ``frota
    verify`` then reports it unsigned."""
    try:
        validate(rec)
    except RecordError as err:
        raise EntryError(str(err)) from None
    check_by(by)
    if registry is not None and rec["vehicle"] not in registry.vehicles:
        raise EntryError(f"vehicle {rec['vehicle']!r} is not in the fleet registry")
    vehicle = rec["vehicle"]
    with store._lock, store._transaction() as tx:
        seq, prev = _next(store, vehicle)
        head = {"vehicle": vehicle, "ts": rec["ts"], "kind": rec["kind"], "agent": OPERATOR}
        stored: Record = {**head, "seq": seq,
                          **{k: v for k, v in rec.items() if k not in (*head, "seq", "prev", "by")},
                          "by": by, "prev": prev}
        digest = record_hash(stored)
        # its chain hash and prev in its row, as the ingest stores a record
        store._executemany(tx, INSERT_RECORD, [record_row(stored, received_ms, digest, prev)])
        if seal is not None:
            sig = seal.sign(checkpoint_message(vehicle, OPERATOR, seq, digest))
            store._executemany(tx, INSERT_CHECKPOINT, [
                (vehicle, OPERATOR, seq, digest, seal.key_id, base64.b64encode(sig).decode(),
                 received_ms)])
        return stored


def withdraw(store: Store, registry: Registry | None, vehicle: str, seq: int, reason: str,
             received_ms: int, by: str, seal: EntrySeal | None) -> Record:
    """Withdraw the vehicle's operator entry ``seq`` by a later signed entry (``withdrawal``:
    its entry's ``ts``, ``withdraws``, ``reason``, ``entered``; docs/records.md); return it as
    stored. The entry stays in the store and in its chain; the rules stop counting it. EntryError
    for an entry that does not exist, is a withdrawal, or is withdrawn already."""
    reason = reason.strip() if isinstance(reason, str) else ""
    if not 1 <= len(reason) <= MAX_REASON_CHARS:
        raise EntryError(f"reason: say why the entry is withdrawn (1-{MAX_REASON_CHARS} "
                         "characters)")
    with store._lock:
        entry = entry_of(store, vehicle, seq)
        if entry is None:
            raise EntryError(f"vehicle {vehicle!r} has no operator entry {seq}")
        if entry["kind"] == "withdrawal":
            raise EntryError(f"entry {seq} is a withdrawal: it cannot be withdrawn (enter the "
                             "withdrawn entry again instead)")
        earlier = withdrawal_of(store, vehicle, seq, entry["ts"])
        if earlier is not None:
            raise EntryError(f"entry {seq} of {vehicle} is withdrawn already (by entry "
                             f"{earlier['seq']})")
        rec = {"vehicle": vehicle, "ts": entry["ts"], "kind": "withdrawal", "withdraws": seq,
               "reason": reason, "entered": ms_to_ts(received_ms)}
        return enter(store, registry, rec, received_ms, by, seal)


def entries(store: Store, vehicle: str) -> list[Record]:
    """The vehicle's operator entries as stored, in seq order, each withdrawn one with
    ``withdrawn_by`` (the seq of its withdrawal) added — not part of the record."""
    rows = store._query("SELECT record FROM records WHERE vehicle = ? AND agent = ? ORDER BY seq",
                        (vehicle, OPERATOR))
    out: list[Record] = [orjson.loads(text) for (text,) in rows]
    gone = {rec["withdraws"]: rec["seq"] for rec in out if rec["kind"] == "withdrawal"}
    for rec in out:
        if rec.get("seq") in gone:
            rec["withdrawn_by"] = gone[rec["seq"]]
    return out


def entry_of(store: Store, vehicle: str, seq: int) -> Record | None:
    """The vehicle's operator entry ``seq`` as stored, or None."""
    rows = store._query("SELECT record FROM records WHERE vehicle = ? AND agent = ? AND seq = ?",
                        (vehicle, OPERATOR, seq))
    if not rows:
        return None
    found: Record = orjson.loads(rows[0][0])
    return found


def withdrawal_of(store: Store, vehicle: str, seq: int, ts: str) -> Record | None:
    """The withdrawal of the vehicle's operator entry ``seq`` (at the entry's ``ts``), or None."""
    ms = ts_to_ms(ts)
    for text in store.events(vehicle, ms, ms + 1):
        rec: Record = orjson.loads(text)
        if rec["kind"] == "withdrawal" and rec.get("agent") == OPERATOR \
                and rec.get("withdraws") == seq:
            return rec
    return None


def _next(store: Store, vehicle: str) -> tuple[int, str]:
    """The next seq of the vehicle's operator entries and the chain hash of the last one (as
    received: its row's or its link's; for an entry stored before entries were chained, the
    hash of the record itself)."""
    rows = store._query(
        "SELECT max(seq) FROM (SELECT seq FROM records WHERE vehicle = ? AND agent = ? "
        "UNION ALL SELECT seq FROM links WHERE vehicle = ? AND agent = ?) AS s",
        (vehicle, OPERATOR, vehicle, OPERATOR))
    last = int(rows[0][0] or 0)
    if last == 0:
        return 1, GENESIS
    link = received_hash(store, vehicle, OPERATOR, last, query=True)
    if link is not None:
        return last + 1, link
    text = store._query("SELECT record FROM records WHERE vehicle = ? AND agent = ? AND seq = ?",
                        (vehicle, OPERATOR, last))
    digest = try_hash(orjson.loads(text[0][0])) if text else None
    return last + 1, digest or GENESIS


def seal_of(key_file: Any, cert_file: Any, ca_file: Any) -> EntrySeal:
    """The collector's seal from its ``[trust]`` files (IdentityError if they do not fit)."""
    from collector.signer import AckSigner

    signer = AckSigner(key_file, cert_file, ca_file)
    return EntrySeal(signer.key_id, signer.key.sign)
