"""The collector's evaluation notice: which stored records its live rules have judged.

After each live evaluation (collector/findings.py) the collector that ran it publishes ONE
message on :data:`EVALUATED_TOPIC` naming, per vehicle and agent, the seq ranges of the records
that evaluation judged for the first time (those stored after the previous evaluation). The
acknowledgement says a record is *stored*; this notice says it is *stored and evaluated*. It is
for monitoring and load tests (``frota sim fleet`` measures its latency to it, docs/deployment.md),
not for agents: an agent never waits for it. QoS 1, not retained; zstd-compressed JSON (a notice
names every vehicle that sent something since the last one).

    {"schema": 1, "collector": "c1", "as_of": "2026-12-01T19:00:00.000Z",
     "evaluated": {"BUS01": {"<agent id>": [[41, 42]]}}}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import zstandard

from protocols.uplink import TOPIC_ROOT, ZSTD_MAGIC, PayloadError, seq_ranges

#: Version of the evaluation notice; bump it (and note it in CHANGELOG.md) if its meaning changes.
EVALUATED_SCHEMA: Final = 1
#: Where every collector publishes its notices (one topic for the fleet, three levels: it never
#: matches the collector's ``frota/v1/+/up`` nor ``frota/v1/+/status`` subscriptions).
EVALUATED_TOPIC: Final = f"{TOPIC_ROOT}/evaluated"
#: A notice larger than this once decompressed is refused (tens of thousands of vehicles fit).
MAX_NOTICE_BYTES: Final = 64 << 20


@dataclass
class Evaluated:
    """One evaluation notice: vehicle → agent → seq ranges judged."""

    collector: str | None
    as_of: str | None
    ranges: dict[str, dict[str, list[tuple[int, int]]]] = field(default_factory=dict)


def notice_of(rows: Iterable[tuple[Any, Any, Any]], collector: str | None,
              as_of: str | None) -> Evaluated:
    """The notice of the stored rows (vehicle, agent, seq) an evaluation judged."""
    seqs: dict[str, dict[str, list[int]]] = {}
    for vehicle, agent, seq in rows:
        seqs.setdefault(str(vehicle), {}).setdefault(str(agent), []).append(int(seq))
    return Evaluated(collector, as_of, {v: {a: seq_ranges(s) for a, s in by_agent.items()}
                                        for v, by_agent in seqs.items()})


def encode_evaluated(notice: Evaluated) -> bytes:
    """The notice's payload (zstd-compressed JSON)."""
    body = {"schema": EVALUATED_SCHEMA, "collector": notice.collector, "as_of": notice.as_of,
            "evaluated": {v: {a: [list(r) for r in rs] for a, rs in by_agent.items()}
                          for v, by_agent in notice.ranges.items()}}
    return zstandard.ZstdCompressor(level=1).compress(orjson.dumps(body))


def decode_evaluated(payload: bytes) -> Evaluated:
    """Read a notice; PayloadError says why one cannot be read (every field is checked)."""
    try:
        if payload.startswith(ZSTD_MAGIC):
            reader = zstandard.ZstdDecompressor().stream_reader(payload)
            payload = reader.read(MAX_NOTICE_BYTES + 1)
            if len(payload) > MAX_NOTICE_BYTES:
                raise PayloadError(f"evaluation notice over {MAX_NOTICE_BYTES} bytes")
        obj = orjson.loads(payload)
    except (zstandard.ZstdError, orjson.JSONDecodeError) as err:
        raise PayloadError(f"unreadable evaluation notice: {err}") from err
    if not isinstance(obj, dict) or obj.get("schema") != EVALUATED_SCHEMA:
        raise PayloadError(f"not an evaluation notice of schema {EVALUATED_SCHEMA}")
    by_vehicle = obj.get("evaluated")
    collector, as_of = obj.get("collector"), obj.get("as_of")
    if not isinstance(by_vehicle, dict) or not all(
            x is None or isinstance(x, str) for x in (collector, as_of)):
        raise PayloadError("malformed evaluation notice")
    out = Evaluated(collector, as_of)
    for vehicle, by_agent in by_vehicle.items():
        if not isinstance(by_agent, dict):
            raise PayloadError(f"malformed evaluation notice: vehicle {vehicle!r}")
        out.ranges[vehicle] = {str(agent): [_range(r) for r in _list(rs)]
                               for agent, rs in by_agent.items()}
    return out


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise PayloadError("malformed evaluation notice: ranges are not a list")
    return value


def _range(value: Any) -> tuple[int, int]:
    if (not isinstance(value, list) or len(value) != 2
            or not all(type(x) is int and x >= 1 for x in value) or value[0] > value[1]):
        raise PayloadError(f"malformed evaluation notice: {value!r} is not a seq range")
    return value[0], value[1]
