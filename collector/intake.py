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
from protocols.records import MAX_SAFE_INT
from protocols.uplink import (
    MAX_DECOMPRESSED_BYTES,
    MAX_PAYLOAD_BYTES,
    ZSTD_MAGIC,
    Ack,
    PayloadError,
    check_record,
    decode_batch,
    seq_ranges,
    vehicle_of_topic,
)

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

    @property
    def whole_payload_rejected(self) -> bool:
        """True when the payload as a whole could not be accepted."""
        return self.agent is None


def _peek(payload: bytes) -> tuple[str | None, list[int]]:
    """Best effort on a rejected payload: its agent and record seqs, if they can be read."""
    if len(payload) > PEEK_LIMIT:
        return None, []
    try:
        if payload.startswith(ZSTD_MAGIC):
            reader = zstandard.ZstdDecompressor().stream_reader(payload)
            payload = reader.read(MAX_DECOMPRESSED_BYTES + 1)
            if len(payload) > MAX_DECOMPRESSED_BYTES:
                return None, []
        obj = json.loads(payload)
    except (zstandard.ZstdError, UnicodeDecodeError, ValueError, RecursionError):
        return None, []
    if not isinstance(obj, dict):
        return None, []
    agent = obj.get("agent") if isinstance(obj.get("agent"), str) and obj["agent"] else None
    records = obj.get("records")
    seqs = [
        seq for r in (records if isinstance(records, list) else []) if (seq := _seq_of(r)) is not None
    ]
    return agent, seqs


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
    topic: str, vehicle: str | None, payload: bytes, reason: str, received_ms: int
) -> Prepared:
    """A whole payload rejected: one ``rejects`` row, and a negative ack if the agent and seqs
    can be read from it."""
    agent, seqs = _peek(payload)
    first, last = (min(seqs), max(seqs)) if seqs else (None, None)
    out = Prepared(topic, vehicle, received_ms)
    out.rejects.append(Reject(received_ms, topic, vehicle, agent, first, last, reason, payload))
    if vehicle is not None and agent is not None and seqs:
        out.ack = Ack(agent=agent, rejected=[(a, b, reason) for a, b in seq_ranges(seqs)])
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
    if vehicle not in known_vehicles():
        reason = f"unknown vehicle {vehicle!r} (not in the fleet registry)"
        return reject_payload(topic, vehicle, payload, reason, received_ms)

    out = Prepared(topic, vehicle, received_ms, agent=batch.agent)
    seqs: list[int] = []
    by_reason: dict[str, list[int]] = {}
    last_ts_ms: int | None = None
    for obj in batch.records:
        try:
            rec = check_record(batch, obj)
        except PayloadError as err:
            seq = _seq_of(obj)
            reason = str(err)
            out.rejects.append(
                Reject(received_ms, topic, vehicle, batch.agent, seq, seq, reason, _json_bytes(obj))
            )
            if seq is not None:
                by_reason.setdefault(reason, []).append(seq)
            continue
        row = record_row(rec, received_ms)
        out.rows.append(row)
        seqs.append(rec["seq"])
        if last_ts_ms is None or row[4] > last_ts_ms:
            last_ts_ms = row[4]
    if last_ts_ms is not None:
        out.state_rows.append((vehicle, last_ts_ms, received_ms, batch.agent))
    out.last_ts_ms = last_ts_ms
    out.ack = Ack(
        agent=batch.agent,
        stored=seq_ranges(seqs),
        rejected=[(a, b, why) for why, s in by_reason.items() for a, b in seq_ranges(s)],
    )
    return out
