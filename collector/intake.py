"""One batch payload → what to store, what to reject and what to answer (pure: no I/O, no clock).

:func:`prepare` never raises on wire data: every way a payload can be wrong becomes a
:class:`~collector.store.Reject` with its reason, and an :class:`~protocols.uplink.Ack` when the
agent and the seqs concerned can be read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import zstandard

from collector.store import Reject, record_row
from collector.store_chain import ChainPart
from protocols.chain import is_hash, parse_checkpoint, record_hash, try_hash
from protocols.records import MAX_SAFE_INT, RecordError
from protocols.uplink import (
    MAX_DECOMPRESSED_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_SEQ,
    PAYLOAD_SCHEMA,
    ZSTD_MAGIC,
    Ack,
    PayloadError,
    check_record,
    decode_batch,
    seq_ranges,
    vehicle_of_topic,
)

#: The agent id of entries made at the collector; never accepted over MQTT.
OPERATOR: Final = "operator"
#: Oversized payloads up to this size are still read to find the agent and seqs to reject.
PEEK_LIMIT: Final = 4 * MAX_PAYLOAD_BYTES


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


def _peek(payload: bytes) -> tuple[str | None, dict[int, str | None], Any]:
    """Best effort on a rejected payload: its agent, its record seqs with their chain hashes
    (None where a record has none) and its schema, if they can be read."""
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
    agent = obj.get("agent") if isinstance(obj.get("agent"), str) and obj["agent"] else None
    records = obj.get("records")
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


def _json_bytes(obj: Any) -> bytes:
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    except (TypeError, ValueError, RecursionError):
        return repr(obj).encode()


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
    """Decode and check one batch payload received on ``topic``."""
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
    if batch.vehicle != vehicle:
        reason = f"batch vehicle {batch.vehicle!r} differs from the topic's {vehicle!r}"
        return reject_payload(topic, vehicle, payload, reason, received_ms)
    if batch.agent == OPERATOR:
        reason = f"agent {OPERATOR!r} is reserved for entries made at the collector"
        return reject_payload(topic, vehicle, payload, reason, received_ms)
    if vehicle not in known_vehicles():
        reason = f"unknown vehicle {vehicle!r} (not in the fleet registry)"
        return reject_payload(topic, vehicle, payload, reason, received_ms, retryable=True)

    out = Prepared(topic, vehicle, received_ms, agent=batch.agent)
    chain = out.chain = ChainPart(vehicle, batch.agent, received_ms)
    hashes: dict[int, str] = {}
    try:
        cp = parse_checkpoint(batch.checkpoint) if batch.checkpoint is not None else None
        if cp is not None:
            chain.checkpoint = (cp.seq, cp.hash, cp.key, cp.sig)
    except ValueError as err:
        out.notes.append(f"checkpoint ignored: {err}")
    seqs: list[int] = []
    by_reason: dict[str, list[int]] = {}
    last_ts_ms: int | None = None
    for obj in batch.records:
        try:
            rec = check_record(batch, obj)
            digest = record_hash(rec)
        except (PayloadError, RecordError) as err:
            seq = _seq_of(obj)
            reason = str(err) if isinstance(err, PayloadError) else f"invalid record: {err}"
            out.rejects.append(
                Reject(received_ms, topic, vehicle, batch.agent, seq, seq, reason, _json_bytes(obj))
            )
            if seq is not None and seq <= MAX_SEQ:  # an ack names seqs up to 2**53 - 1
                by_reason.setdefault(reason, []).append(seq)
                kept = try_hash(obj)  # a hash-only entry keeps the chain whole
                if kept is not None:
                    hashes[seq] = kept
                    prev = obj.get("prev") if isinstance(obj, dict) else None
                    chain.links.append((seq, kept, prev if is_hash(prev) else None, "rejected"))
            continue
        row = record_row(rec, received_ms)
        out.rows.append(row)
        seqs.append(rec["seq"])
        hashes[rec["seq"]] = digest
        prev = rec.get("prev")
        chain.links.append((rec["seq"], digest, prev if is_hash(prev) else None, "stored"))
        if last_ts_ms is None or row[4] > last_ts_ms:
            last_ts_ms = row[4]
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
