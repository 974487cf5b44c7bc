"""A record's ``raw`` device frame rebuilt instead of stored, in a compacted day (the digital disc,
issue 15 item 6; docs/collector.md, "The digital disc at rest").

Most of a compacted day's bytes are its frames: the fields a frame carries are in the record
already, what is left (the CRC, the clock, the frame number) is what zstd cannot guess. So where
the frame can be *rebuilt* from the record and the day's frames before it, the blob keeps a flag
instead of the bytes. The encoder rebuilds every flagged frame at compaction and keeps the bytes
verbatim wherever the rebuild differs by one bit (a corrupt, odd or unknown frame); the decoder
rebuilds them in the same order from the same context. Two ways:

- :data:`REPEAT` — the same bytes as the raw of the record just before it (one registrador
  status frame gives a speed record and, when a card or activity changes, driver records);
- :data:`STATUS` — a registrador status frame (firmware-notes/registrador.md §3.1): the day's
  previous status frame with this record's frame number (``device_seq``), clock (``ts``), speed,
  odometer and ignition, and the CRC computed again. What a speed record does not carry (the
  cards, their activities, the other flags) comes from that previous frame: a frame where they
  changed is kept, and is the context of the next.

The layouts are the protocol's own (``protocols/registrador/frames.py`` through
``protocols/registrador/flat.py``, the decoder's fast path), so they cannot drift apart. NMEA
sentences carry fields the position record does not (satellites, HDOP, altitude): kept verbatim.
"""

from __future__ import annotations

from typing import Any, Final

from protocols.records import ts_to_ms
from protocols.registrador import frames as f
from protocols.registrador.flat import flatten

NONE: Final = 0
REPEAT: Final = 1
STATUS: Final = 2

_BODY: Final = flatten(f.BODY, stop="payload").struct        # LEN, TYPE, SEQ, CLOCK
_PAYLOAD: Final = flatten(f.STATUS_PAYLOAD).struct
_HEAD: Final = len(f.SYNC) + _BODY.size


class Context:
    """What the frames before a record give: the previous raw, the previous status frame."""

    def __init__(self) -> None:
        self.last: bytes | None = None
        self.status: bytes | None = None

    def saw(self, raw: bytes) -> None:
        """A record's actual frame (kept or rebuilt), in stored order."""
        self.last = raw
        if raw[:2] == f.SYNC and len(raw) > 3 and raw[3] == f.STATUS:
            self.status = raw


def rebuild(how: int, rec: dict[str, Any], ctx: Context) -> bytes | None:
    """The frame rebuilt ``how``, or None when it cannot be."""
    if how == REPEAT:
        return ctx.last
    if how == STATUS:
        return _status(rec, ctx.status)
    return None


def _status(rec: dict[str, Any], previous: bytes | None) -> bytes | None:
    if previous is None or len(previous) != _HEAD + _PAYLOAD.size + f.CRC_SIZE:
        return None
    try:
        seq, kmh, odometer, ignition = (rec["device_seq"], rec["kmh"], rec["odometer_m"],
                                        rec["ignition"])
        clock = ts_to_ms(rec["ts"])
        _, _, flags, *slots = _PAYLOAD.unpack_from(previous, _HEAD)
        flags = (flags & ~f.FLAG_IGNITION) | (f.FLAG_IGNITION if ignition is True else 0)
        payload = _PAYLOAD.pack(round(kmh * 100), odometer, flags, *slots)
        body = _BODY.pack(len(payload), f.STATUS, seq, clock) + payload
    except Exception:  # noqa: BLE001 — any field that does not fit: the frame is kept verbatim
        return None
    return f.SYNC + body + f.crc16(body).to_bytes(f.CRC_SIZE, "big")


def choose(rec: dict[str, Any], raw: bytes, ctx: Context) -> int:
    """How the encoder may drop ``raw``: the first way that rebuilds it byte for byte, else
    :data:`NONE` (kept)."""
    for how in (REPEAT, STATUS):
        if rebuild(how, rec, ctx) == raw:
            return how
    return NONE
