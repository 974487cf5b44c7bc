"""The agent ↔ collector wire format over MQTT: topics, record batches, acknowledgements, status.

Documented in ``firmware-notes/mqtt.md``. Every payload is a JSON object with a ``schema`` field;
record batches may be zstd-compressed (recognised by the zstd frame magic). The collector
acknowledges what it has *stored* (a broker's PUBACK is not enough) and rejects what it cannot
accept, so the agent neither loses nor resends forever.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import zstandard

from protocols.records import Record, RecordError, is_vehicle_id, validate

#: Version of every uplink payload (batch, ack, status). Bump it, and note it in CHANGELOG.md,
#: whenever a payload changes meaning.
PAYLOAD_SCHEMA: Final = 1
TOPIC_ROOT: Final = "frota/v1"
#: The collector's subscription to every vehicle's batches.
UP_SUBSCRIPTION: Final = f"{TOPIC_ROOT}/+/up"
#: Largest payload the collector accepts on the wire, and once decompressed.
MAX_PAYLOAD_BYTES: Final = 1 << 20
MAX_DECOMPRESSED_BYTES: Final = 16 << 20
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"


class PayloadError(ValueError):
    """A payload that cannot be accepted; the message is the reason stored in ``rejects``."""


def up_topic(vehicle: str) -> str:
    """Topic the agent publishes its record batches to."""
    return f"{TOPIC_ROOT}/{vehicle}/up"


def ack_topic(vehicle: str) -> str:
    """Topic the collector publishes acknowledgements to, for that vehicle's agent."""
    return f"{TOPIC_ROOT}/{vehicle}/ack"


def status_topic(vehicle: str) -> str:
    """Retained topic with the agent's ``online``/``offline`` status (the last will)."""
    return f"{TOPIC_ROOT}/{vehicle}/status"


def check_broker_url(value: str) -> str:
    """``value`` if it is an ``mqtt://`` or ``mqtts://`` URL with a host and a valid port, else
    ValueError with the reason (the agent's and the collector's ``broker.url``)."""
    parts = urlsplit(value)
    if parts.scheme not in ("mqtt", "mqtts"):
        raise ValueError(f"{value!r} is not an mqtt:// or mqtts:// URL")
    if not parts.hostname:
        raise ValueError(f"{value!r} has no host")
    try:
        _ = parts.port  # raises ValueError on a port that is not a number or out of range
    except ValueError as err:
        raise ValueError(f"{value!r} has a bad port") from err
    return value


def mask_url(value: str) -> str:
    """``value`` with the password of its user info replaced by ``***`` (for logs)."""
    parts = urlsplit(value)
    if parts.password is None:
        return value
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def vehicle_of_topic(topic: str) -> str | None:
    """The vehicle id in a ``frota/v1/<vehicle>/<leaf>`` topic, or None."""
    parts = topic.split("/")
    if len(parts) != 4 or f"{parts[0]}/{parts[1]}" != TOPIC_ROOT or not is_vehicle_id(parts[2]):
        return None
    return parts[2]


@dataclass
class Batch:
    """A decoded batch of one agent's records (envelope checked, records not yet validated)."""

    vehicle: str
    agent: str
    records: list[Any]
    schema: int = PAYLOAD_SCHEMA


@dataclass
class Ack:
    """What the collector says about an agent's records: stored ranges and rejected ranges."""

    agent: str
    stored: list[tuple[int, int]] = field(default_factory=list)
    rejected: list[tuple[int, int, str]] = field(default_factory=list)
    schema: int = PAYLOAD_SCHEMA


def seq_ranges(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted, merged inclusive ranges covering ``seqs`` (e.g. 1,2,3,7 → (1,3),(7,7))."""
    out: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if out and seq == out[-1][1] + 1:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def encode_batch(
    vehicle: str, agent: str, records: Sequence[Record], *, compress: bool = True, level: int = 3
) -> bytes:
    """A batch payload; zstd-compressed JSON when ``compress`` (see mqtt.md for the measurement)."""
    body = _dumps(
        {"schema": PAYLOAD_SCHEMA, "vehicle": vehicle, "agent": agent, "records": list(records)}
    )
    if not compress:
        return body
    return zstandard.ZstdCompressor(level=level).compress(body)


def encode_batch_json(
    vehicle: str, agent: str, records_json: Sequence[str], *, compress: bool = True, level: int = 3
) -> bytes:
    """The same payload as :func:`encode_batch` from records already serialised as JSON objects.

    The agent's buffer stores each record's JSON once; splicing it avoids a parse and a dump per
    record on the Pi.
    """
    head = _dumps({"schema": PAYLOAD_SCHEMA, "vehicle": vehicle, "agent": agent, "records": []})
    body = head[:-3] + b"[" + ",".join(records_json).encode() + b"]}"
    if not compress:
        return body
    return zstandard.ZstdCompressor(level=level).compress(body)


def _loads(payload: bytes) -> Any:
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise PayloadError(f"oversized payload: {len(payload)} bytes > {MAX_PAYLOAD_BYTES}")
    if payload.startswith(ZSTD_MAGIC):
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(payload)
            payload = reader.read(MAX_DECOMPRESSED_BYTES + 1)
        except zstandard.ZstdError as err:
            raise PayloadError(f"corrupt zstd payload: {err}") from err
        if len(payload) > MAX_DECOMPRESSED_BYTES:
            raise PayloadError(f"oversized payload: more than {MAX_DECOMPRESSED_BYTES} bytes")
    try:
        return json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PayloadError(f"not JSON: {err}") from err


def _envelope(obj: Any, *keys: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise PayloadError("payload is not a JSON object")
    schema = obj.get("schema")
    if schema != PAYLOAD_SCHEMA:
        raise PayloadError(f"unsupported schema {schema!r} (this collector reads {PAYLOAD_SCHEMA})")
    for key in keys:
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise PayloadError(f"payload field {key!r} missing or not a string")
    checked: dict[str, Any] = obj
    return checked


def decode_batch(payload: bytes) -> Batch:
    """Decode and check a batch envelope; raise PayloadError with the reason otherwise."""
    obj = _envelope(_loads(payload), "vehicle", "agent")
    records = obj.get("records")
    if not isinstance(records, list):
        raise PayloadError("payload field 'records' missing or not a list")
    return Batch(vehicle=obj["vehicle"], agent=obj["agent"], records=records)


def check_record(batch: Batch, obj: Any) -> Record:
    """Validate one record of a batch against the contract and the batch's vehicle and agent."""
    try:
        rec = validate(obj)
    except RecordError as err:
        raise PayloadError(f"invalid record: {err}") from err
    if rec["vehicle"] != batch.vehicle:
        raise PayloadError(f"record vehicle {rec['vehicle']!r} differs from the batch's")
    if rec.get("agent") != batch.agent or "seq" not in rec:
        raise PayloadError("record lacks the batch's agent or a seq")
    return rec


def encode_ack(ack: Ack) -> bytes:
    """An acknowledgement payload."""
    return _dumps(
        {
            "schema": PAYLOAD_SCHEMA,
            "agent": ack.agent,
            "stored": [list(r) for r in ack.stored],
            "rejected": [{"first": a, "last": b, "reason": why} for a, b, why in ack.rejected],
        }
    )


def decode_ack(payload: bytes) -> Ack:
    """Decode an acknowledgement; raise PayloadError if it is not one."""
    obj = _envelope(_loads(payload), "agent")
    try:
        stored = [(int(a), int(b)) for a, b in obj.get("stored", [])]
        rejected = [
            (int(r["first"]), int(r["last"]), str(r["reason"])) for r in obj.get("rejected", [])
        ]
    except (TypeError, ValueError, KeyError) as err:
        raise PayloadError(f"malformed acknowledgement: {err}") from err
    return Ack(agent=obj["agent"], stored=stored, rejected=rejected)


def encode_status(vehicle: str, agent: str, status: str, ts: str | None = None) -> bytes:
    """The retained status payload (``online``/``offline``); also used as the last will."""
    return _dumps(
        {"schema": PAYLOAD_SCHEMA, "vehicle": vehicle, "agent": agent, "status": status, "ts": ts}
    )
