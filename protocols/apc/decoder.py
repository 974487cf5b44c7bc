"""APC-485 bus decoder: requests and responses → ``door`` and ``device`` records (firmware-notes/apc.md).

The decoder sees the whole bus (the poller's requests and the sensors' answers, as a logger or
the agent itself captures them). Door counters have no clock, so the caller supplies the time:
``feed(data, ts_ms)`` or ``set_time(ts_ms)`` before ``feed``. Records produced while no time is
known are dropped and counted (``undated``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from protocols.apc.frames import (
    ACK_RESET,
    COUNTER_MODULO,
    COUNTS_SIZE,
    READ_COUNTS,
    RESPONSE,
    DoorCounts,
    parse_counts,
    scan,
)
from protocols.base import DecoderStats
from protocols.records import Record, make_record, ms_to_ts

#: Cap on the bytes kept while waiting for the rest of a frame (a frame is at most 22 bytes).
MAX_BUFFER = 4096


@dataclass
class ApcStats(DecoderStats):
    """DecoderStats plus the poll traffic and the records dropped for want of a time."""

    requests: int = 0
    responses: int = 0
    undated: int = 0

    def summary(self) -> dict[str, int]:
        """The counters as a dict, the APC ones included."""
        return {
            **super().summary(),
            "requests": self.requests,
            "responses": self.responses,
            "undated": self.undated,
        }


@dataclass
class _Door:
    """What the decoder remembers about one sensor (one address, one door)."""

    last: DoorCounts
    answers: int = 1
    boarded: int = 0
    alighted: int = 0
    conditions: frozenset[str] = field(default_factory=frozenset)


class ApcDecoder:
    """Stream decoder for an APC-485 bus capture; reads no clock, never raises on wire data."""

    def __init__(self, vehicle: str, doors: Mapping[int, int] | None = None) -> None:
        self.vehicle = vehicle
        #: address → door number; an address not listed is door number = address.
        self.door_numbers = dict(doors or {})
        #: The time records are stamped with (ms since the epoch), supplied by the caller.
        self.now_ms: int | None = None
        self.stats = ApcStats()
        self._buf = bytearray()
        self._doors: dict[int, _Door] = {}

    def set_time(self, ts_ms: int) -> None:
        """The clock hook: the caller's best estimate of the time now; stamps the records of
        the next bytes (door counters have no clock)."""
        self.now_ms = ts_ms

    def door_number(self, address: int) -> int:
        """The door a sensor address counts (configured, else the address itself)."""
        return self.door_numbers.get(address, address)

    def answers(self, address: int) -> int:
        """How many COUNTS answers this address has given (0 if never heard)."""
        door = self._doors.get(address)
        return 0 if door is None else door.answers

    def state(self) -> dict[str, Any]:
        """What the decoder remembers per sensor (baselines, unreported counts), as JSON-able data.

        The agent saves it in the same transaction as the records it goes with, and gives it back
        to :meth:`restore` after a restart: the counts since the last saved state are then read
        again from the sensors' cumulative counters, never lost and never counted twice.
        """
        return {
            str(address): {
                "last": asdict(door.last),
                "answers": door.answers,
                "boarded": door.boarded,
                "alighted": door.alighted,
                "conditions": sorted(door.conditions),
            }
            for address, door in sorted(self._doors.items())
        }

    def restore(self, state: Mapping[str, Any]) -> int:
        """Take back a :meth:`state` (after a restart); entries that do not parse are skipped.

        Returns how many sensors were restored. Bytes half-received are not part of the state.
        """
        doors: dict[int, _Door] = {}
        for key, entry in state.items():
            try:
                last = DoorCounts(**entry["last"])
                door = _Door(
                    last,
                    answers=int(entry["answers"]),
                    boarded=int(entry["boarded"]),
                    alighted=int(entry["alighted"]),
                    conditions=frozenset(str(c) for c in entry["conditions"]),
                )
                doors[int(key)] = door
            except (KeyError, TypeError, ValueError):
                continue
        self._doors = doors
        return len(doors)

    def pending_acks(self) -> list[int]:
        """Addresses whose last answer had the counter-reset flag up: send them ACK_RESET."""
        return sorted(a for a, d in self._doors.items() if d.last.counter_reset)

    def feed(self, data: bytes, ts_ms: int | None = None) -> list[Record]:
        """Consume bus bytes (at ``ts_ms`` if given); return the records they complete."""
        if ts_ms is not None:
            self.now_ms = ts_ms
        self.stats.bytes_in += len(data)
        self._buf += data
        out: list[Record] = []
        pos = 0
        dropped = bytearray()
        while pos < len(self._buf):
            verdict, size, frame = scan(self._buf, pos)
            if verdict == "short":
                break
            if frame is None:
                if verdict == "crc":
                    self.stats.crc_failures += 1
                dropped += self._buf[pos : pos + size]
                pos += size
                continue
            if dropped:
                self._drop(bytes(dropped))
                dropped.clear()
            pos += size
            self.stats.frames += 1
            self._frame(frame.address, frame.command, frame.data, frame.raw, out)
        if dropped:
            self._drop(bytes(dropped))
        del self._buf[:pos]
        if len(self._buf) > MAX_BUFFER:  # cannot happen with LENGTH <= 16, kept as a guard
            self._drop(bytes(self._buf))
            self._buf.clear()
        return out

    def finish(self) -> list[Record]:
        """End of input: report counts not yet reported (door still open), drop a partial frame."""
        if self._buf:
            self._drop(bytes(self._buf))
            self._buf.clear()
        return self.report_pending()

    def report_pending(self) -> list[Record]:
        """``door`` records (door state unchanged) for the passengers counted and not yet
        reported — e.g. held while no time was known — stamped with the time given last."""
        out: list[Record] = []
        for address, door in sorted(self._doors.items()):
            if door.boarded or door.alighted:
                self._door_record(address, door, b"", out)
        return out

    def pending_passengers(self) -> int:
        """Passengers counted and not yet in a record (all doors)."""
        return sum(door.boarded + door.alighted for door in self._doors.values())

    def _drop(self, chunk: bytes) -> None:
        self.stats.bytes_dropped += len(chunk)
        self.stats.reject("no frame", chunk)

    def _frame(self, address: int, command: int, data: bytes, raw: bytes, out: list[Record]) -> None:
        if not command & RESPONSE:
            if command in (READ_COUNTS, ACK_RESET) and not data:
                self.stats.requests += 1
            else:
                self.stats.unknown_types += 1
            return
        self.stats.responses += 1
        if command == ACK_RESET | RESPONSE and not data:
            return
        if command != READ_COUNTS | RESPONSE:
            self.stats.unknown_types += 1
            self.stats.reject(f"command 0x{command:02X}", raw)
            return
        if len(data) != COUNTS_SIZE:
            self.stats.malformed += 1
            self.stats.reject("COUNTS length", raw)
            return
        self._counts(address, parse_counts(data), raw, out)

    def _counts(self, address: int, now: DoorCounts, raw: bytes, out: list[Record]) -> None:
        door = self._doors.get(address)
        if door is None:
            # First answer seen from this sensor: a baseline (its earlier counts are unknown,
            # and counting them could count passengers twice after a restart) — unless its
            # counter-reset flag is still up: then no master has acknowledged its counts since
            # they started from 0, so every one of them is a passenger no record holds yet
            # (a bus whose reader starts after the first passengers board loses none).
            door = self._doors[address] = _Door(now)
            if now.counter_reset:
                door.boarded, door.alighted = now.entered, now.exited
            self._conditions(address, door, now, raw, out)
            return
        before = door.last
        door.answers += 1
        reset = (now.counter_reset and not before.counter_reset) or now.resets != before.resets
        if reset:
            # Counted from zero since the reset: the new values are the deltas. Passengers
            # counted between the previous poll and the reset are lost, never invented.
            boarded, alighted = now.entered, now.exited
            self._device(address, "counter_reset", raw, out)
        else:
            boarded = (now.entered - before.entered) % COUNTER_MODULO
            alighted = (now.exited - before.exited) % COUNTER_MODULO
        door.boarded += boarded
        door.alighted += alighted
        door.last = now
        if now.open != before.open or (not now.open and (boarded or alighted)):
            # A state change; or passengers counted with the door closed before and after: a
            # whole stop fell between two polls (a slow poll, a simulator at a high time
            # scale), and its passengers go out now rather than wait for the next stop.
            self._door_record(address, door, raw, out)
        self._conditions(address, door, now, raw, out)

    def _conditions(self, address: int, door: _Door, now: DoorCounts, raw: bytes, out: list[Record]) -> None:
        active = frozenset(
            name for name, on in (("blocked", now.blocked), ("tamper", now.tamper)) if on
        )
        if active == door.conditions:
            return
        for name in sorted(active - door.conditions):
            self._device(address, name, raw, out)
        if not active:
            self._device(address, "ok", raw, out)
        door.conditions = active

    def _door_record(self, address: int, door: _Door, raw: bytes, out: list[Record]) -> None:
        if self.now_ms is None:
            self.stats.undated += 1
            return
        out.append(
            make_record(
                "door",
                self.vehicle,
                ms_to_ts(self.now_ms),
                door=self.door_number(address),
                open=door.last.open,
                boarded=door.boarded,
                alighted=door.alighted,
                raw=raw.hex() if raw else None,
            )
        )
        door.boarded = door.alighted = 0

    def _device(self, address: int, status: str, raw: bytes, out: list[Record]) -> None:
        if self.now_ms is None:
            self.stats.undated += 1
            return
        out.append(
            make_record(
                "device",
                self.vehicle,
                ms_to_ts(self.now_ms),
                device="apc",
                status=status,
                detail=f"address {address}, door {self.door_number(address)}",
                raw=raw.hex(),
            )
        )
