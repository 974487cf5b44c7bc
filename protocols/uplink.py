"""The agent ↔ collector wire format over MQTT: topics, record batches, acknowledgements, status.

Documented in ``firmware-notes/mqtt.md``. Every payload is a JSON object with a ``schema`` field;
record batches may be zstd-compressed (recognised by the zstd frame magic). The collector
acknowledges what it has *stored* (a broker's PUBACK is not enough) and rejects what it cannot
accept, so the agent neither loses nor resends forever.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import orjson
import zstandard

from protocols.records import Record, RecordError, is_vehicle_id, validated_ts_ms

#: Version of every uplink payload (batch, ack, status). Bump it, and note it in CHANGELOG.md,
#: whenever a payload changes meaning. 2: records carry ``prev``, batches a signed
#: ``checkpoint``; acks carry the chain hash of what they cover, ``retryable``, ``conflicts`` and
#: the collector's signature.
PAYLOAD_SCHEMA: Final = 2
#: Bounds of an acknowledgement (firmware-notes/mqtt.md): entries per list, reason length.
ACK_MAX_ENTRIES: Final = 10_000
ACK_MAX_REASON: Final = 500
MAX_SEQ: Final = (1 << 53) - 1
TOPIC_ROOT: Final = "frota/v1"
#: The collector's subscription to every vehicle's batches.
UP_SUBSCRIPTION: Final = f"{TOPIC_ROOT}/+/up"
#: A shared-subscription group name (MQTT 5 ``$share/GROUP/...``): no ``/``, ``+``, ``#``.
SHARE_GROUP_RE: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
#: Largest payload the collector accepts on the wire, and once decompressed.
MAX_PAYLOAD_BYTES: Final = 1 << 20
MAX_DECOMPRESSED_BYTES: Final = 16 << 20
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"


class PayloadError(ValueError):
    """A payload that cannot be accepted; the message is the reason stored in ``rejects``."""


def up_topic(vehicle: str) -> str:
    """Topic the agent publishes its record batches to."""
    return f"{TOPIC_ROOT}/{vehicle}/up"


def up_subscription(share_group: str | None = None) -> str:
    """The collector's subscription to every vehicle's batches: alone (``frota/v1/+/up``) or as
    one member of a shared-subscription group (``$share/GROUP/frota/v1/+/up``: the broker gives
    each batch to ONE member of the group, docs/deployment.md)."""
    if share_group is None:
        return UP_SUBSCRIPTION
    if not SHARE_GROUP_RE.match(share_group):
        raise ValueError(f"{share_group!r} is not a shared-subscription group name "
                         "(1 to 64 letters, digits, '_' or '-')")
    return f"$share/{share_group}/{UP_SUBSCRIPTION}"


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
    #: The agent's signed checkpoint, as sent (checked by the collector, see protocols/chain.py).
    checkpoint: Any = None


@dataclass
class Ack:
    """What the collector says about an agent's records (firmware-notes/mqtt.md): stored ranges,
    rejected ranges (with a reason, retryable or final) and conflicts, each bound to content by
    ``hashes`` (seq → the chain hash of the record at that seq: the last of each range, each
    conflict), and signed by the collector (``collector``, ``key``, ``cert``, ``sig``)."""

    agent: str
    stored: list[tuple[int, int]] = field(default_factory=list)
    rejected: list[tuple[int, int, str]] = field(default_factory=list)
    conflicts: list[int] = field(default_factory=list)
    schema: int = PAYLOAD_SCHEMA
    #: One flag per ``rejected`` range: True when sending it again later may succeed.
    retryable: list[bool] = field(default_factory=list, compare=False)
    hashes: dict[int, str] = field(default_factory=dict, compare=False)
    vehicle: str | None = field(default=None, compare=False)
    collector: str | None = field(default=None, compare=False)
    key: str | None = field(default=None, compare=False)
    cert: str | None = field(default=None, compare=False)
    sig: str | None = field(default=None, compare=False)
    #: The collector's answer may have changed (the vehicle was added to its registry): the
    #: agent sends its retryable rejects again (an ack with no entries; firmware-notes/mqtt.md).
    replay: bool = field(default=False, compare=False)


def seq_ranges(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted, merged inclusive ranges covering ``seqs`` (e.g. 1,2,3,7 → (1,3),(7,7))."""
    out: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if out and seq == out[-1][1] + 1:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out


#: One zstd compressor (per level) and decompressor per thread: making one costs several times
#: what compressing or decompressing a small batch does.
_zstd = threading.local()


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def encode_batch(
    vehicle: str,
    agent: str,
    records: Sequence[Record],
    *,
    compress: bool = True,
    level: int = 3,
    checkpoint: dict[str, Any] | None = None,
) -> bytes:
    """A batch payload; zstd-compressed JSON when ``compress`` (see mqtt.md for the measurement)."""
    head: dict[str, Any] = {"schema": PAYLOAD_SCHEMA, "vehicle": vehicle, "agent": agent}
    if checkpoint is not None:
        head["checkpoint"] = checkpoint
    body = _dumps({**head, "records": list(records)})
    if not compress:
        return body
    return _compress(body, level)


def encode_batch_json(
    vehicle: str,
    agent: str,
    records_json: Sequence[str],
    *,
    compress: bool = True,
    level: int = 3,
    checkpoint: dict[str, Any] | None = None,
) -> bytes:
    """The same payload as :func:`encode_batch` from records already serialised as JSON objects.

    The agent's buffer stores each record's JSON once; splicing it avoids a parse and a dump per
    record on the Pi.
    """
    obj: dict[str, Any] = {"schema": PAYLOAD_SCHEMA, "vehicle": vehicle, "agent": agent}
    if checkpoint is not None:
        obj["checkpoint"] = checkpoint
    head = _dumps({**obj, "records": []})
    body = head[:-3] + b"[" + ",".join(records_json).encode() + b"]}"
    if not compress:
        return body
    return _compress(body, level)


def _compress(body: bytes, level: int) -> bytes:
    """One zstd frame (its size declared) by this thread's compressor of ``level``."""
    kept: dict[int, zstandard.ZstdCompressor] | None = getattr(_zstd, "compressors", None)
    if kept is None:
        kept = _zstd.compressors = {}
    compressor = kept.get(level)
    if compressor is None:
        compressor = kept[level] = zstandard.ZstdCompressor(level=level)
    out: bytes = compressor.compress(body)
    return out


def _decompress(payload: bytes) -> bytes:
    """The first zstd frame of ``payload``, at most MAX_DECOMPRESSED_BYTES + 1 bytes of it.

    A frame that declares its size (the agent's do) is decompressed in one call by this
    thread's decompressor, once the size is known to be within the bound (``decompress`` would
    allocate whatever a frame declares); any other through a bounded stream reader."""
    try:
        size = zstandard.frame_content_size(payload)
        if 0 <= size <= MAX_DECOMPRESSED_BYTES:
            decompressor = getattr(_zstd, "decompressor", None)
            if decompressor is None:
                decompressor = _zstd.decompressor = zstandard.ZstdDecompressor()
            out: bytes = decompressor.decompress(payload)
            return out
        reader = zstandard.ZstdDecompressor().stream_reader(payload)
        read: bytes = reader.read(MAX_DECOMPRESSED_BYTES + 1)
    except zstandard.ZstdError as err:
        raise PayloadError(f"corrupt zstd payload: {err}") from err
    return read


_NOT_READ: Final = object()
#: Every byte of a payload as one of three: ``0`` a digit, ``1`` what may come right before a
#: JSON number (``[``, ``,``, ``:``, ``-``, whitespace), ``x`` anything else.
_NUMBER_BYTES: Final = bytes(
    ord("0") if byte in b"0123456789" else ord("1") if byte in b"[,:- \t\n\r" else ord("x")
    for byte in range(256)
)
#: Where an integer beyond 64 bits may begin: 19 digits right after what may precede a number.
_LONG_NUMBER: Final = b"1" + b"0" * 19


def _orjson_loads(payload: bytes) -> Any:
    """``json.loads(payload)`` read by orjson (twice as fast: the ingest reads every record
    through here), or _NOT_READ where the two could differ — then :mod:`json` reads it.

    orjson refuses what :mod:`json` reads otherwise (NaN and infinity, a lone surrogate, a
    double beyond the largest, a byte-order mark, UTF-16 or UTF-32 text): those go to
    :mod:`json`, which reads or refuses them as it always did. Everything orjson accepts it
    reads to the same values (tests/protocols/test_uplink_loads.py), but for one: an integer
    beyond 64 bits, which orjson reads as a double. A payload where one may be — 19 digits
    right after ``[``, ``,``, ``:``, ``-`` or whitespace, or at the start — goes to :mod:`json`
    too (found in C: the payload's bytes mapped to three classes, then one search; a run of
    digits inside a string, such as a raw frame's hex, mostly follows a letter, a digit or a
    quote, and where it does not, :mod:`json` reads it as before)."""
    if _LONG_NUMBER in payload.translate(_NUMBER_BYTES) or payload[:19].isdigit():
        return _NOT_READ
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return _NOT_READ


def _loads(payload: bytes) -> Any:
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise PayloadError(f"oversized payload: {len(payload)} bytes > {MAX_PAYLOAD_BYTES}")
    if payload.startswith(ZSTD_MAGIC):
        payload = _decompress(payload)
        if len(payload) > MAX_DECOMPRESSED_BYTES:
            raise PayloadError(f"oversized payload: more than {MAX_DECOMPRESSED_BYTES} bytes")
    fast = _orjson_loads(payload)
    if fast is not _NOT_READ:
        return fast
    try:
        return json.loads(payload)
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, an integer too long
        raise PayloadError(f"not JSON: {err}") from err
    except RecursionError as err:
        raise PayloadError("JSON nested too deep") from err


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
    return Batch(
        vehicle=obj["vehicle"], agent=obj["agent"], records=records, checkpoint=obj.get("checkpoint")
    )


def checked_ts_ms(batch: Batch, obj: Any) -> int:
    """Validate one record of a batch against the contract and the batch's vehicle and agent;
    its ``ts`` in ms (which the validation reads: the collector's ingest keeps it in the
    record's row without reading it again)."""
    try:
        ts_ms = validated_ts_ms(obj)
    except RecordError as err:
        raise PayloadError(f"invalid record: {err}") from err
    if obj["vehicle"] != batch.vehicle:
        raise PayloadError(f"record vehicle {obj['vehicle']!r} differs from the batch's")
    if obj.get("agent") != batch.agent or "seq" not in obj:
        raise PayloadError("record lacks the batch's agent or a seq")
    if obj["kind"] == "withdrawal":  # docs/records.md: only the collector writes one
        raise PayloadError("a withdrawal is an operator entry made at the collector; agents never "
                           "send one")
    return ts_ms


def ack_body(ack: Ack) -> dict[str, Any]:
    """The acknowledgement as a JSON object (what the collector signs, without ``sig``)."""
    body: dict[str, Any] = {
        "schema": PAYLOAD_SCHEMA,
        "agent": ack.agent,
        "stored": [[a, b, ack.hashes.get(b)] for a, b in ack.stored],
        "rejected": [
            {
                "first": a,
                "last": b,
                "reason": why[:ACK_MAX_REASON],
                "retryable": bool(ack.retryable[i]) if i < len(ack.retryable) else False,
                "hash": ack.hashes.get(b),
            }
            for i, (a, b, why) in enumerate(ack.rejected)
        ],
        "conflicts": [[seq, ack.hashes.get(seq)] for seq in ack.conflicts],
    }
    for name in ("vehicle", "collector", "key", "cert"):
        if getattr(ack, name) is not None:
            body[name] = getattr(ack, name)
    if ack.replay:
        body["replay"] = True
    return body


def encode_ack(ack: Ack) -> bytes:
    """An acknowledgement payload."""
    body = ack_body(ack)
    if ack.sig is not None:
        body["sig"] = ack.sig
    return _dumps(body)


def _seq(value: Any, what: str) -> int:
    if type(value) is not int or not 1 <= value <= MAX_SEQ:
        raise PayloadError(f"malformed acknowledgement: {what} {value!r} is not a seq")
    return value


def _hash(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 64 or value.strip("0123456789abcdef"):
        raise PayloadError(f"malformed acknowledgement: {what} is not a chain hash")
    return value


def _range(first: Any, last: Any, what: str) -> tuple[int, int]:
    a, b = _seq(first, what), _seq(last, what)
    if a > b:
        raise PayloadError(f"malformed acknowledgement: {what} {a}-{b} runs backwards")
    return a, b


def _entries(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key, [])
    if not isinstance(value, list) or len(value) > ACK_MAX_ENTRIES:
        raise PayloadError(f"malformed acknowledgement: {key!r} is not a list of at most "
                           f"{ACK_MAX_ENTRIES}")
    return value


def decode_ack(payload: bytes) -> Ack:
    """Decode an acknowledgement; raise PayloadError if it is not one. Every field is checked
    for its type and bounds (a seq is an integer in 1..2**53-1, never ``1e999``), so nothing a
    broker delivers can make the agent raise anything else."""
    obj = _envelope(_loads(payload), "agent")
    ack = Ack(agent=obj["agent"])
    for entry in _entries(obj, "stored"):
        if not isinstance(entry, list) or len(entry) not in (2, 3):
            raise PayloadError("malformed acknowledgement: a stored entry is not [first, last, hash]")
        a, b = _range(entry[0], entry[1], "stored")
        ack.stored.append((a, b))
        digest = _hash(entry[2] if len(entry) == 3 else None, "stored hash")
        if digest is not None:
            ack.hashes[b] = digest
    for entry in _entries(obj, "rejected"):
        if not isinstance(entry, dict):
            raise PayloadError("malformed acknowledgement: a rejected entry is not an object")
        a, b = _range(entry.get("first"), entry.get("last"), "rejected")
        reason, retryable = entry.get("reason"), entry.get("retryable", False)
        if not isinstance(reason, str) or not isinstance(retryable, bool):
            raise PayloadError("malformed acknowledgement: a rejected entry lacks its reason")
        ack.rejected.append((a, b, reason[:ACK_MAX_REASON]))
        ack.retryable.append(retryable)
        digest = _hash(entry.get("hash"), "rejected hash")
        if digest is not None:
            ack.hashes[b] = digest
    for entry in _entries(obj, "conflicts"):
        if not isinstance(entry, list) or len(entry) != 2:
            raise PayloadError("malformed acknowledgement: a conflict entry is not [seq, hash]")
        seq = _seq(entry[0], "conflict")
        ack.conflicts.append(seq)
        digest = _hash(entry[1], "conflict hash")
        if digest is not None:
            ack.hashes[seq] = digest
    for name in ("vehicle", "collector", "key", "cert", "sig"):
        value = obj.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > 8192):
            raise PayloadError(f"malformed acknowledgement: {name!r} is not a string")
        setattr(ack, name, value)
    replay = obj.get("replay", False)
    if not isinstance(replay, bool):
        raise PayloadError("malformed acknowledgement: 'replay' is not true or false")
    ack.replay = replay
    return ack


def encode_status(vehicle: str, agent: str, status: str, ts: str | None = None) -> bytes:
    """The retained status payload (``online``/``offline``); also used as the last will."""
    return _dumps(
        {"schema": PAYLOAD_SCHEMA, "vehicle": vehicle, "agent": agent, "status": status, "ts": ts}
    )
