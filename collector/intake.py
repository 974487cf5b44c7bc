"""One batch payload → what to store, what to reject and what to answer (pure: no I/O, no clock).

:func:`prepare` never raises on wire data: every way a payload can be wrong becomes a
:class:`~collector.store.Reject` with its reason, and an :class:`~protocols.uplink.Ack` when the
agent and the seqs concerned can be read. What one payload may cost is bounded (docs/collector.md,
"Bounds"): records per batch, reject rows per payload (records failing alike share one row with
their count), the length of a reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any, Final

import zstandard

from collector.store import Reject, record_row
from collector.store_chain import ChainPart
from protocols import canonical_batch
from protocols.chain import is_hash, parse_checkpoint, record_hash, try_hash
from protocols.records import MAX_SAFE_INT, RecordError, shown
from protocols.uplink import (
    MAX_DECOMPRESSED_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_SEQ,
    PAYLOAD_SCHEMA,
    ZSTD_MAGIC,
    Ack,
    PayloadError,
    checked_ts_ms,
    decode_batch,
    seq_ranges,
    vehicle_of_topic,
)

#: The agent id of entries made at the collector; never accepted over MQTT.
OPERATOR: Final = "operator"
#: Oversized payloads up to this size are still read to find the agent and seqs to reject.
PEEK_LIMIT: Final = 4 * MAX_PAYLOAD_BYTES
#: Records one batch may hold (the agent sends at most ``uplink.batch_records`` = 10,000).
MAX_BATCH_RECORDS: Final = 10_000
#: Reject rows one payload may add: one per reason; past this, the rest share the last row.
MAX_REJECT_ROWS: Final = 16
#: Characters of an agent id (the agent makes a UUID, 36).
MAX_AGENT_CHARS: Final = 128
#: How the reason of a payload refused for its vehicle, not (yet) in the registry, begins.
UNKNOWN_VEHICLE: Final = "unknown vehicle"
#: Characters of a reason kept (in ``rejects`` and in the ack); longer ones are cut with "…".
MAX_REASON_CHARS: Final = 300

log = logging.getLogger(__name__)
#: U+0000 in a record's JSON (an escape not itself escaped): PostgreSQL keeps no NUL in text.
_NUL: Final = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


@dataclass
class Prepared:
    """The outcome of reading one payload, ready to be committed in one transaction."""

    topic: str
    vehicle: str | None
    received_ms: int
    #: The agent of an accepted batch (None when the whole payload is rejected).
    agent: str | None = None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    #: (vehicle, latest record ts, received, agent) for the ``vehicles`` table.
    state_rows: list[tuple[str, int, int, str | None]] = field(default_factory=list)
    last_ts_ms: int | None = None
    #: What to publish on the vehicle's ack topic after the commit, if anyone can be told.
    ack: Ack | None = None
    #: The batch's links and checkpoint (collector/store_chain.py); conflicts found at commit.
    chain: ChainPart | None = None
    #: Things worth a log line that are not rejects (an unreadable checkpoint).
    notes: list[str] = field(default_factory=list)
    #: The chain hash of each record of the batch that has one, by seq.
    hashes: dict[int, str] = field(default_factory=dict)

    @property
    def whole_payload_rejected(self) -> bool:
        """True when the payload as a whole could not be accepted."""
        return self.agent is None


def _agent_id_ok(agent: object) -> bool:
    """An agent id the collector keeps: 1–128 printable characters (no NUL, no control)."""
    return isinstance(agent, str) and 0 < len(agent) <= MAX_AGENT_CHARS and agent.isprintable()


def _reason(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def _peek(payload: bytes) -> tuple[str | None, dict[int, str | None], Any]:
    """Best effort on a rejected payload: its agent, its record seqs with their chain hashes
    (None where a record has none) and its schema, if they can be read."""
    try:
        return _read_peek(payload)
    except Exception:  # best effort: whatever a hostile payload raises, nobody can be told
        log.debug("cannot read the agent and seqs of a rejected payload", exc_info=True)
        return None, {}, None


def _read_peek(payload: bytes) -> tuple[str | None, dict[int, str | None], Any]:
    if len(payload) > PEEK_LIMIT:
        return None, {}, None
    try:
        if payload.startswith(ZSTD_MAGIC):
            reader = zstandard.ZstdDecompressor().stream_reader(payload)
            payload = reader.read(MAX_DECOMPRESSED_BYTES + 1)
            if len(payload) > MAX_DECOMPRESSED_BYTES:
                return None, {}, None
        obj = json.loads(payload)
    except (zstandard.ZstdError, UnicodeDecodeError, ValueError, RecursionError):
        return None, {}, None
    if not isinstance(obj, dict):
        return None, {}, None
    agent = obj.get("agent") if _agent_id_ok(obj.get("agent")) else None
    records = obj.get("records")
    if isinstance(records, list) and len(records) > MAX_BATCH_RECORDS:
        return agent, {}, obj.get("schema")
    by_seq = {
        seq: r
        for r in (records if isinstance(records, list) else [])
        if (seq := _seq_of(r)) is not None
    }
    # Only the last record of each range is hashed (what the ack names): bounded work.
    ends = {b for _, b in seq_ranges(by_seq)}
    seqs = {seq: try_hash(rec) if seq in ends else None for seq, rec in by_seq.items()}
    return agent, seqs, obj.get("schema")


def _seq_of(obj: Any) -> int | None:
    """The seq of a rejected record, if it has one that a seq can be (an integer a record may
    carry, docs/records.md): it is answered in the ack and kept in ``rejects``."""
    seq = obj.get("seq") if isinstance(obj, dict) else None
    return seq if type(seq) is int and 1 <= seq <= MAX_SAFE_INT else None


def _json_bytes(obj: Any, payload: bytes) -> bytes:
    """Refused records as JSON for their ``rejects`` row, else their repr; ``payload`` (the
    whole batch they came in) when neither can be written: a record nested deeper than the
    interpreter's recursion limit, which orjson reads (up to 1024 levels) and json.dumps and
    repr cannot write back."""
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return repr(obj).encode()
    except RecursionError:
        return payload


def reject_payload(
    topic: str,
    vehicle: str | None,
    payload: bytes,
    reason: str,
    received_ms: int,
    *,
    retryable: bool = False,
) -> Prepared:
    """A whole payload rejected: one ``rejects`` row, and a negative ack if the agent and seqs
    can be read from it (``retryable``: sending it again later may succeed — an unknown vehicle,
    a newer schema; firmware-notes/mqtt.md). A payload of a newer schema than this collector's
    is always retryable."""
    agent, seqs, schema = _peek(payload)
    reason = _reason(reason)
    if type(schema) is int and schema > PAYLOAD_SCHEMA:
        retryable = True
    first, last = (min(seqs), max(seqs)) if seqs else (None, None)
    out = Prepared(topic, vehicle, received_ms)
    out.rejects.append(Reject(received_ms, topic, vehicle, agent, first, last, reason, payload))
    if vehicle is not None and agent is not None and seqs:
        ranges = seq_ranges(seqs)
        out.ack = Ack(agent=agent, rejected=[(a, b, reason) for a, b in ranges],
                      retryable=[retryable] * len(ranges), vehicle=vehicle)
        out.ack.hashes = {b: h for _, b in ranges if (h := seqs[b]) is not None}
    return out


def prepare(
    topic: str,
    payload: bytes,
    known_vehicles: Callable[[], frozenset[str]],
    received_ms: int,
    max_payload_bytes: int = MAX_PAYLOAD_BYTES,
) -> Prepared:
    """Decode and check one batch payload received on ``topic``; never raises."""
    try:
        return _prepare(topic, payload, known_vehicles, received_ms, max_payload_bytes)
    except Exception as err:  # a bug or an input no check foresaw: still a reject, never lost
        log.exception("%s: unexpected error reading a payload of %d bytes", topic, len(payload))
        reason = f"unreadable payload ({type(err).__name__})"
        try:
            return reject_payload(topic, vehicle_of_topic(topic), payload, reason, received_ms)
        except Exception:
            log.exception("%s: cannot even reject the payload as a whole", topic)
            out = Prepared(topic, None, received_ms)
            out.rejects.append(Reject(received_ms, topic, None, None, None, None, reason, payload))
            return out


def _prepare(
    topic: str,
    payload: bytes,
    known_vehicles: Callable[[], frozenset[str]],
    received_ms: int,
    max_payload_bytes: int,
) -> Prepared:
    vehicle = vehicle_of_topic(topic)
    if vehicle is None:
        return reject_payload(topic, None, payload, "not a frota uplink topic", received_ms)
    if len(payload) > max_payload_bytes:
        reason = f"oversized payload: {len(payload)} bytes > {max_payload_bytes}"
        return reject_payload(topic, vehicle, payload, reason, received_ms)
    try:
        batch = decode_batch(payload)
    except PayloadError as err:
        return reject_payload(topic, vehicle, payload, str(err), received_ms)
    except RecursionError:
        return reject_payload(topic, vehicle, payload, "JSON nested too deep", received_ms)
    if not _agent_id_ok(batch.agent):
        reason = (f"payload field 'agent' {shown(batch.agent)} is not 1-{MAX_AGENT_CHARS} "
                  "printable characters")
        return reject_payload(topic, vehicle, payload, reason, received_ms)
    if batch.vehicle != vehicle:
        reason = f"batch vehicle {shown(batch.vehicle)} differs from the topic's {vehicle!r}"
        return reject_payload(topic, vehicle, payload, reason, received_ms)
    if batch.agent == OPERATOR:
        reason = f"agent {OPERATOR!r} is reserved for entries made at the collector"
        return reject_payload(topic, vehicle, payload, reason, received_ms)
    if vehicle not in known_vehicles():
        reason = f"{UNKNOWN_VEHICLE} {vehicle!r} (not in the fleet registry)"
        return reject_payload(topic, vehicle, payload, reason, received_ms, retryable=True)
    if len(batch.records) > MAX_BATCH_RECORDS:
        reason = f"too many records: {len(batch.records)} > {MAX_BATCH_RECORDS} in one batch"
        return reject_payload(topic, vehicle, payload, reason, received_ms)

    out = Prepared(topic, vehicle, received_ms, agent=batch.agent)
    chain = out.chain = ChainPart(vehicle, batch.agent, received_ms)
    hashes: dict[int, str] = {}
    try:
        cp = parse_checkpoint(batch.checkpoint) if batch.checkpoint is not None else None
        if cp is not None:
            chain.checkpoint = (cp.seq, cp.hash, cp.key, cp.sig)
    except ValueError as err:
        out.notes.append(f"checkpoint ignored: {err}")
    failed: dict[str, list[Any]] = {}  # reason → the records refused for it
    rows = out.rows
    links = chain.links
    done = 0  # rows whose links and hashes are in ``links`` and ``hashes``
    # every record's chain hash and the text stored (its canonical form), the checks of the
    # canonical form done once for the batch
    for obj, form in zip(batch.records, record_hashes(batch.records), strict=True):
        try:
            ts_ms = checked_ts_ms(batch, obj)  # the record itself, checked
            if form is None:  # not by the batch's way: the record's own (or why it has none)
                digest, text = record_hash(obj), None
            else:
                digest, text = form
            # the record's row carries its chain hash and its prev as received, if a string
            # (collector/store_chain.py; one that is no hash never matches the hash before it)
            prev = obj.get("prev")
            row = record_row(obj, received_ms, digest, prev if type(prev) is str else None,
                             ts_ms, text)
            if "\\u0000" in row[9] and _NUL.search(row[9]):
                raise RecordError("a string holds U+0000, which no store keeps")
        except (PayloadError, RecordError, TypeError, ValueError, OverflowError) as err:
            # TypeError, ValueError, OverflowError: orjson found no JSON form to store
            reason = str(err) if isinstance(err, PayloadError) else f"invalid record: {err}"
            failed.setdefault(_reason(reason), []).append(obj)
            seq = _seq_of(obj)
            if seq is not None and seq <= MAX_SEQ:  # an ack names seqs up to 2**53 - 1
                # a hash-only entry keeps the chain whole
                kept = form[0] if form is not None else try_hash(obj)
                if kept is not None:
                    done = _stored_links(rows, done, links, hashes)  # in the records' order
                    hashes[seq] = kept
                    prev = obj.get("prev") if isinstance(obj, dict) else None
                    links.append((seq, kept, prev if is_hash(prev) else None, "rejected"))
            continue
        rows.append(row)
    _stored_links(rows, done, links, hashes)
    seqs = list(map(_SEQ, rows))
    last_ts_ms = max(map(_TS_MS, rows)) if rows else None
    by_reason: dict[str, list[int]] = {}
    for reason, objs in _bounded(failed).items():
        bad_seqs = [seq for obj in objs if (seq := _seq_of(obj)) is not None and seq <= MAX_SEQ]
        first, last = (min(bad_seqs), max(bad_seqs)) if bad_seqs else (None, None)
        if len(objs) == 1:
            row_reason, body = reason, _json_bytes(objs[0], payload)
        else:
            row_reason, body = f"{reason} ({len(objs)} records)", _json_bytes(objs, payload)
        out.rejects.append(
            Reject(received_ms, topic, vehicle, batch.agent, first, last, row_reason, body)
        )
        if bad_seqs:
            by_reason[reason] = bad_seqs
    if last_ts_ms is not None:
        out.state_rows.append((vehicle, last_ts_ms, received_ms, batch.agent))
    out.last_ts_ms = last_ts_ms
    out.ack = Ack(
        agent=batch.agent,
        stored=seq_ranges(seqs),
        rejected=[(a, b, why) for why, s in by_reason.items() for a, b in seq_ranges(s)],
        vehicle=vehicle,
    )
    out.ack.retryable = [False] * len(out.ack.rejected)  # a malformed record stays malformed
    out.hashes = hashes
    out.ack.hashes = {
        b: hashes[b] for _, b in [*out.ack.stored, *[(a, b) for a, b, _ in out.ack.rejected]]
        if b in hashes
    }
    return out


_SEQ: Final = itemgetter(2)
_TS_MS: Final = itemgetter(4)
_HASH: Final = itemgetter(11)
_PREV: Final = itemgetter(12)


def _stored_links(rows: list[tuple[Any, ...]], done: int,
                  links: list[tuple[int, str, str | None, str]], hashes: dict[int, str]) -> int:
    """The links and hashes of ``rows[done:]`` (stored records: seq, hash, prev from their
    rows) added, column by column; how many rows have theirs now."""
    if done < len(rows):
        fresh = rows[done:] if done else rows
        seqs, digests = list(map(_SEQ, fresh)), list(map(_HASH, fresh))
        hashes.update(zip(seqs, digests, strict=True))
        links.extend(zip(seqs, digests, map(_PREV, fresh), repeat("stored")))
    return len(rows)


def record_hashes(objs: list[Any]) -> list[tuple[str, str | None] | None]:
    """The chain hash of each record of a batch by the batch path (protocols/canonical_batch.py:
    the checks of the canonical form done column by column, in C), with the text its row keeps
    (its canonical form: the very bytes the chain hashes, or None where that form holds a
    double rounded to its precision, a number the record does not hold); None for each record
    that path leaves to :func:`protocols.chain.record_hash` (the same bytes by the longer road,
    or the reason a record has none): the same hashes as record_hash, record by record."""
    sha256 = hashlib.sha256
    rounded: list[int] = []
    out: list[tuple[str, str | None] | None] = [
        None if text is None else (sha256(text.encode()).hexdigest(), text)
        for text in canonical_batch.texts(objs, (), rounded)]
    for i in rounded:
        form = out[i]
        if form is not None:
            out[i] = (form[0], None)  # stored as received (record_row writes it)
    return out


def _bounded(failed: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """At most MAX_REJECT_ROWS reasons: past that, the records of the other reasons share one."""
    if len(failed) <= MAX_REJECT_ROWS:
        return failed
    items = list(failed.items())
    kept = dict(items[: MAX_REJECT_ROWS - 1])
    others = [obj for _, objs in items[MAX_REJECT_ROWS - 1 :] for obj in objs]
    kept[f"invalid record ({len(items) - MAX_REJECT_ROWS + 1} other reasons; the first: "
         f"{items[MAX_REJECT_ROWS - 1][0]})"[:MAX_REASON_CHARS]] = others
    return kept
