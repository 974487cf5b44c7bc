"""The registrador (tachograph): a stream source whose records carry the device's clock, with
catch-up by history request.

Its frames carry ``device_seq`` (+1 per frame, never reset: firmware-notes/registrador.md §4).
Gaps in the numbers are frames the agent missed — it was down, the cable was out, noise broke a
frame — and the registrador keeps them in its memory: the source asks for them with history
requests (``50``) and decodes the answers (``51``) like live frames, with their original device
times. The buffer skips a frame it already holds (live and downloaded), so asking too much is
harmless. Where to start comes from the buffer (the last frame captured from this source), so the
catch-up also covers the time the agent itself was not running.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

import serial

from agent.config import DeviceConfig
from agent.sources.base import SourceContext
from agent.sources.stream import StreamSource
from protocols.records import Record
from protocols.registrador import RegistradorDecoder, encode_history_request

log = logging.getLogger(__name__)

#: Frames asked per history request (an hour at 1 Hz takes ~24 s of the line at 115200 baud).
CHUNK_FRAMES = 1000
#: On a buffer that holds no frame of this registrador yet (a new Pi), how far back to fetch.
FIRST_START_FRAMES = 3600
#: Bytes of one history record of a status frame (firmware-notes/registrador.md §5).
HISTORY_RECORD_BYTES = 77
#: Tries per request before a range is given up (the registrador ignores a request with a bad CRC).
TRIES = 3


@dataclass
class _Request:
    request_id: int
    first: int
    last: int
    sent_at: float
    timeout_s: float
    tries: int


class RegistradorSource(StreamSource):
    """Reads the registrador's frames and downloads the ones it missed."""

    def __init__(self, config: DeviceConfig, context: SourceContext) -> None:
        super().__init__(config, context)
        self.reg_decoder = RegistradorDecoder(context.vehicle)
        self.decoder = self.reg_decoder
        self.last_device_seq = context.last_device_seq
        self._port: serial.Serial | None = None
        self._expect: int | None = None
        self._wanted: deque[tuple[int, int, int]] = deque()  # (first, last, tries so far)
        self._request: _Request | None = None
        self._next_id = 1
        self.frames_requested = 0
        self.frames_gone = 0
        self._got: set[int] = set()  # frames of the request in flight received so far
        self._rewind_lock = threading.Lock()
        self._dropped: set[int] = set()  # frames a full disk made the buffer drop, to ask again

    def _saved_floor(self) -> int | None:
        """The catch-up floor committed with our last records (every frame below it is done)."""
        if self.state is None:
            return None
        try:
            saved = json.loads(self.state.load() or "{}")
            floor = saved.get("floor") if isinstance(saved, dict) else None
        except ValueError:
            return None
        return floor if isinstance(floor, int) and floor > 0 else None

    def floor(self) -> int | None:
        """The lowest frame not yet captured nor given up: the next expected, or the first
        of a range still to download (None before the first frame)."""
        firsts = [first for first, _, _ in self._wanted]
        if self._request is not None:
            firsts.append(self._request.first)
        if self._expect is not None:
            firsts.append(self._expect)
        return min(firsts) if firsts else None

    def session(self, port: serial.Serial) -> None:
        """Read (and catch up) until silent, hung up or stopped."""
        self._port = port
        if self._expect is None:
            # The first session of this run: from the floor saved with the records (a range
            # still being downloaded when the agent was killed), else after the last frame.
            last = self.last_device_seq()
            floor = self._saved_floor()
            self._expect = floor if floor is not None else None if last is None else last + 1
        req = self._request
        if req is not None:
            # Its answer will not come on the new line: ask again for the frames of it that did
            # not arrive (a pull late in a long download re-asks only its tail); not a try.
            self._request = None
            for first, last in reversed(self._missing(req, req.first)):
                self._wanted.appendleft((first, last, req.tries - 1))
        try:
            super().session(port)
        finally:
            self._port = None

    def dropped(self, records: list[Record]) -> None:
        """A full disk dropped these frames: ask the registrador for exactly them again."""
        seqs = {r["device_seq"] for r in records if r.get("device_seq") is not None}
        if seqs:
            with self._rewind_lock:
                self._dropped.update(seqs)

    def _rewind(self) -> None:
        with self._rewind_lock:
            dropped, self._dropped = self._dropped, set()
        if dropped:
            # Only the frames dropped: the frames captured between them may since have been
            # uploaded and evicted to make room, and asking for them again would capture them a
            # second time under new seqs. Queued first, so the floor saved with the next records
            # stays at or below them until they are in.
            ranges: list[list[int]] = []
            for seq in sorted(dropped):
                if ranges and ranges[-1][1] == seq - 1:
                    ranges[-1][1] = seq
                else:
                    ranges.append([seq, seq])
            log.info("%s: %d frames from %d dropped by a full buffer; asking again",
                     self.name, len(dropped), ranges[0][0])
            for first, last in reversed(ranges):
                for start in reversed(range(first, last + 1, CHUNK_FRAMES)):
                    self._wanted.appendleft((start, min(last, start + CHUNK_FRAMES - 1), 0))
            if self.state is not None:
                self.state.resume()

    def state_for(self, records: list[Record]) -> str | None:
        """Queue history requests for the gaps the records reveal; the catch-up floor is
        committed with them."""
        self._rewind()
        if not records:
            return None
        seqs = sorted({r["device_seq"] for r in records if r.get("device_seq") is not None})
        if seqs:
            self._note(seqs)
            req = self._request
            if req is not None:
                self._got.update(s for s in seqs if req.first <= s <= req.last)
        floor = self.floor()
        return None if self.state is None or floor is None else json.dumps({"floor": floor})

    def _note(self, seqs: list[int]) -> None:
        if self._expect is None:
            # A new buffer: fetch what the registrador still holds of the last hour.
            self._expect = max(1, seqs[0] - FIRST_START_FRAMES)  # frames are numbered from 1
        prev = self._expect - 1
        for seq in seqs:
            if seq < self._expect:
                continue  # a frame downloaded by history, or one seen before
            if seq > prev + 1:
                self._want(prev + 1, seq - 1)
            prev = seq
        self._expect = max(self._expect, prev + 1)

    def _want(self, first: int, last: int) -> None:
        log.info("%s: frames %d-%d missed; asking the registrador", self.name, first, last)
        for start in range(first, last + 1, CHUNK_FRAMES):
            self._wanted.append((start, min(last, start + CHUNK_FRAMES - 1), 0))

    def _missing(self, req: _Request, start: int) -> list[tuple[int, int]]:
        """The ranges of frames ``start``…``req.last`` of the request not received so far."""
        ranges: list[list[int]] = []
        for seq in range(start, req.last + 1):
            if seq in self._got:
                continue
            if ranges and ranges[-1][1] == seq - 1:
                ranges[-1][1] = seq
            else:
                ranges.append([seq, seq])
        self._got.clear()
        return [(first, last) for first, last in ranges]

    def _ask_again(self, req: _Request, start: int) -> None:
        """Frames of an answered request that never arrived whole (noise broke them): again."""
        ranges = self._missing(req, start)
        if not ranges:
            return
        if req.tries >= TRIES:
            log.warning("%s: %d frames of %d-%d never arrived whole", self.name,
                        sum(last - first + 1 for first, last in ranges), req.first, req.last)
            return
        for first, last in reversed(ranges):
            self._wanted.appendleft((first, last, req.tries))

    def idle(self) -> None:
        """Check the request in flight and send the next one (called after every read)."""
        port = self._port
        if port is None:
            return
        req = self._request
        if req is not None:
            ends = self.reg_decoder.history_ends
            done = next((e for e in ends if e.request_id == req.request_id), None)
            ends.clear()
            if done is not None:
                if done.oldest > req.first:
                    gone = min(done.oldest, req.last + 1) - req.first
                    self.frames_gone += gone
                    log.warning(
                        "%s: frames %d-%d are no longer in the registrador's memory",
                        self.name, req.first, req.first + gone - 1,
                    )
                self._ask_again(req, max(req.first, done.oldest))
                self._request = None
            elif time.monotonic() - req.sent_at > req.timeout_s:
                if req.tries < TRIES:
                    self._wanted.appendleft((req.first, req.last, req.tries))
                else:
                    log.warning("%s: no answer for frames %d-%d", self.name, req.first, req.last)
                self._request = None
        if self._request is None and self._wanted:
            first, last, tries = self._wanted.popleft()
            request_id = self._next_id
            self._next_id = (self._next_id % 0xFFFF_FFFF) + 1
            port.write(encode_history_request(first, last, request_id))
            count = last - first + 1
            line_s = count * HISTORY_RECORD_BYTES * 10 / self.config.baudrate
            self._request = _Request(request_id, first, last, time.monotonic(), 5.0 + 2 * line_s, tries + 1)
            self._got.clear()
            self.frames_requested += count
