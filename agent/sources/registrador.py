"""The registrador (tachograph): a stream source whose records carry the device's clock, with
catch-up by history request.

Its frames carry ``device_seq`` (+1 per frame, never reset: firmware-notes/registrador.md §4).
Gaps in the numbers are frames the agent missed — it was down, the cable was out, noise broke a
frame — and the registrador keeps them in its memory: the source asks for them with history
requests (``50``) and decodes the answers (``51``) like live frames, with their original device
times. The buffer skips a frame it already holds (live and downloaded), so asking too much is
harmless, and frames it knows it captured are not asked for. Where to start comes from the buffer
(the floor committed with the frames), so the catch-up also covers the time the agent itself was
not running. On a noisy line frames are asked again, in ranges, until they arrive or the
registrador says they have left its memory (firmware-notes/agent.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import serial

from agent.config import DeviceConfig
from agent.sources.base import READ_TIMEOUT_S, SourceContext, agent_record
from agent.sources.stream import StreamSource
from protocols.records import Record, ts_to_ms
from protocols.registrador import RegistradorDecoder, encode_history_request

log = logging.getLogger(__name__)

#: Frames asked per history request (an hour at 1 Hz takes ~24 s of the line at 115200 baud).
CHUNK_FRAMES = 1000
#: On a buffer that holds no frame of this registrador yet (a new Pi), how far back to fetch.
FIRST_START_FRAMES = 3600
#: Bytes of one history record of a status frame (firmware-notes/registrador.md §5).
HISTORY_RECORD_BYTES = 77
#: Missing frames this close together are asked in one range (the frames between come again
#: and the buffer skips them): a noisy line breaks frames here and there, and one request per
#: broken frame made the catch-up crawl. 13 frames (87 ms of the line) cost about what one
#: more request costs: its bytes and the end's, a turn of the agent's loop, and the QUIET_S
#: wait when noise breaks its end (one time in four at 1e-3).
MERGE_GAP = 13
#: A request whose answer has been quiet this long after its expected length (no frame of it
#: arriving) has lost its end to noise, or was never heard: its missing frames are asked again.
QUIET_S = 0.25
#: A range whose asks get no answer at all (no frame of it, no history end: a registrador that
#: does not hear or answer requests) waits before it is asked again, doubling from
#: BACKOFF_MIN_S up to BACKOFF_MAX_S: it is asked until the registrador says the frames have
#: left its memory (~27 hours), never given up after a number of tries.
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 15.0
#: Unanswered asks in a row before backing off: at a bit-error rate of 1e-3 a one-frame answer
#: and its end are both broken in about one ask of ten; that is noise, not a registrador that
#: stopped answering.
BACKOFF_AFTER = 3
#: The read timeout while a request is in flight (seconds): the quiet that ends an answer whose
#: end was lost is noticed this soon (the line's usual 0.5 s would add up to half a second).
IN_FLIGHT_READ_S = 0.05


@dataclass
class _Wanted:
    """A range of frames still to download."""

    first: int
    last: int
    fails: int = 0  # asks in a row that brought none of its frames
    not_before: float = 0.0  # monotonic time before which it is not asked (backoff)


@dataclass
class _Request:
    request_id: int
    first: int
    last: int
    sent_at: float
    line_s: float  # how long its answer takes on the line
    fails: int
    progress_at: float = 0.0  # when a frame of it not held before last arrived (0: none yet)
    have: int = 0  # frames of its range held
    answered: bool = False  # a frame of its range or its history end arrived


def merge_ranges(ranges: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """Sorted inclusive ranges with at most ``gap`` frames between them joined into one."""
    out: list[list[int]] = []
    for first, last in ranges:
        if out and first - out[-1][1] - 1 <= gap:
            out[-1][1] = max(out[-1][1], last)
        else:
            out.append([first, last])
    return [(a, b) for a, b in out]


def subtract_ranges(first: int, last: int, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``first``…``last`` without the sorted ranges ``taken``."""
    out: list[tuple[int, int]] = []
    cursor = first
    for a, b in taken:
        if b < cursor:
            continue
        if a > last:
            break
        if a > cursor:
            out.append((cursor, a - 1))
        cursor = max(cursor, b + 1)
    if cursor <= last:
        out.append((cursor, last))
    return out


class RegistradorSource(StreamSource):
    """Reads the registrador's frames and downloads the ones it missed."""

    def __init__(self, config: DeviceConfig, context: SourceContext) -> None:
        super().__init__(config, context)
        self.reg_decoder = RegistradorDecoder(context.vehicle)
        self.decoder = self.reg_decoder
        self.last_device_seq = context.last_device_seq
        self._port: serial.Serial | None = None
        self._expect: int | None = None
        self._wanted: deque[_Wanted] = deque()
        self._request: _Request | None = None
        self._next_id = 1
        self.frames_requested = 0
        self.frames_gone = 0
        #: Frames delivered while a catch-up runs (cleared when it is done): what a request's
        #: answer left missing is judged against all of them, not against that answer alone
        #: (each pass over a noisy line breaks a new 38 % of the frames it carries).
        self._have: set[int] = set()
        self._rewind_lock = threading.Lock()
        self._dropped: set[int] = set()  # frames a full disk made the buffer drop, to ask again
        #: The runs of frames first…last already captured (set by the agent from the buffer,
        #: which keeps them after the records are evicted): never asked for again.
        self.captured_runs: Callable[[int, int], list[tuple[int, int]]] = lambda a, b: []
        self._observed_ms: int | None = None  # the registrador clock last given the time keeper
        self._live_seq: int | None = None  # the number of the newest live frame

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
        firsts = [w.first for w in self._wanted]
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
                self._wanted.appendleft(_Wanted(first, last, req.fails))
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
            self._have.difference_update(dropped)  # delivered, but not captured
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
                    self._wanted.appendleft(_Wanted(start, min(last, start + CHUNK_FRAMES - 1)))
            if self.state is not None:
                self.state.resume()

    def state_for(self, records: list[Record]) -> str | None:
        """Queue history requests for the gaps the records reveal (and again for frames a full
        buffer dropped); the catch-up floor is committed with them."""
        self._rewind()
        if not records:
            return None
        seqs = sorted({r["device_seq"] for r in records if r.get("device_seq") is not None})
        if seqs:
            self._note(seqs)
            req = self._request
            if req is not None or self._wanted:
                for seq in seqs:
                    ours = req is not None and req.first <= seq <= req.last
                    if ours and req is not None:
                        req.answered = True
                    if seq in self._have:
                        continue
                    self._have.add(seq)
                    if ours and req is not None:
                        req.have += 1
                        req.progress_at = time.monotonic()
        floor = self.floor()
        return None if self.state is None or floor is None else json.dumps({"floor": floor})

    def observe_clock(self, records: list[Record]) -> None:
        """Tell the time keeper the registrador's clock *now*: the time of the newest live frame,
        never the original time of a frame downloaded by history — minutes or hours in the
        past, where the records of clockless devices (doors, the agent's own) would land.

        A frame is live when it is newer than every frame seen (a higher number; or a later
        time, for a replaced registrador numbering from 1 again). A downloaded frame is older
        on both counts — also one whose history record noise broke, found inside it by the
        one-byte slide and so decoded like a live frame."""
        newest: int | None = None
        for rec in records:
            seq = rec.get("device_seq")
            if seq is None:
                continue
            ts_ms = ts_to_ms(rec["ts"])
            live_seq = self._live_seq is None or seq > self._live_seq
            if live_seq or (self._observed_ms is not None and ts_ms > self._observed_ms):
                self._live_seq = seq if live_seq else self._live_seq
                newest = ts_ms
        if newest is not None and newest != self._observed_ms:
            self._observed_ms = newest
            self.clock.observe_ms(newest, self.name)

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
        """Queue the frames first…last for download, but those already captured."""
        ranges = subtract_ranges(first, last, self.captured_runs(first, last))
        if not ranges:
            return
        log.info("%s: frames %d-%d missed; asking the registrador (%d frames)", self.name,
                 ranges[0][0], ranges[-1][1], sum(b - a + 1 for a, b in ranges))
        for a, b in merge_ranges(ranges, MERGE_GAP):
            for start in range(a, b + 1, CHUNK_FRAMES):
                self._wanted.append(_Wanted(start, min(b, start + CHUNK_FRAMES - 1)))

    def _missing(self, req: _Request, start: int) -> list[tuple[int, int]]:
        """The ranges of frames ``start``…``req.last`` of the request not captured yet."""
        ranges: list[list[int]] = []
        for seq in range(start, req.last + 1):
            if seq in self._have:
                continue
            if ranges and ranges[-1][1] == seq - 1:
                ranges[-1][1] = seq
            else:
                ranges.append([seq, seq])
        if not ranges:
            return []
        taken = self.captured_runs(ranges[0][0], ranges[-1][1])
        return [part for a, b in ranges for part in subtract_ranges(a, b, taken)]

    def _ask_again(self, req: _Request, start: int) -> None:
        """Frames of a request that never arrived whole (noise broke them, the end was lost, the
        request was not heard): asked again, in ranges — at once if some of its frames came,
        else after a backoff. Never given up: only the registrador's memory ends the asking."""
        ranges = self._missing(req, start)
        if not ranges:
            return
        fails = 0 if req.answered else req.fails + 1
        not_before = 0.0
        if fails >= BACKOFF_AFTER:
            backoff = BACKOFF_MIN_S * 2 ** (fails - BACKOFF_AFTER)
            not_before = time.monotonic() + min(BACKOFF_MAX_S, backoff)
            if fails % 4 == 0:
                log.warning("%s: frames %d-%d still missing after %d asks; asking again",
                            self.name, ranges[0][0], ranges[-1][1], fails)
        for first, last in reversed(merge_ranges(ranges, MERGE_GAP)):
            self._wanted.appendleft(_Wanted(first, last, fails, not_before))

    def _gone(self, first: int, last: int, oldest: int) -> None:
        """Frames the registrador no longer holds: lost for good, and a ``device`` record says
        which (the only way the agent gives up on a frame)."""
        self.frames_gone += last - first + 1
        detail = (f"registrador frames {first}-{last} lost: no longer in its memory "
                  f"(the oldest it holds is {oldest})")
        log.warning("%s: %s", self.name, detail)
        self.sink("agent", [agent_record(self.vehicle, self.clock, "agent", "fault", detail)])

    def _next_wanted(self) -> _Wanted | None:
        """The next range to ask: the first one due (in queue order; ranges backing off wait),
        joined with every other range due that lies within MERGE_GAP of it (up to CHUNK_FRAMES):
        the frames a pass over a noisy download left go out in one request, not one each."""
        now = time.monotonic()
        due = [w for w in self._wanted if w.not_before <= now]
        if not due:
            return None
        head = due[0]
        group: list[_Wanted] = []
        for wanted in sorted(due, key=lambda w: w.first):
            if group and (wanted.first - group[-1].last - 1 > MERGE_GAP
                          or max(wanted.last, group[-1].last) - group[0].first >= CHUNK_FRAMES):
                if head in group:
                    break
                group = []
            group.append(wanted)
        for wanted in group:
            self._wanted.remove(wanted)
        return _Wanted(group[0].first, max(w.last for w in group), head.fails)

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
                req.answered = True
                log.debug("%s: request %d answered: %d of %d-%d held", self.name, req.request_id,
                          req.have, req.first, req.last)
                if done.oldest > req.first:
                    self._gone(req.first, min(done.oldest - 1, req.last), done.oldest)
                self._ask_again(req, max(req.first, done.oldest))
                self._request = None
            elif req.have == req.last - req.first + 1:
                self._request = None  # every frame came: the end (lost to noise?) is not needed
            elif time.monotonic() - max(req.sent_at + req.line_s, req.progress_at) > QUIET_S:
                log.debug("%s: request %d quiet: %d of %d-%d held", self.name, req.request_id,
                          req.have, req.first, req.last)
                self._ask_again(req, req.first)
                self._request = None
        if self._request is None and self._wanted:
            wanted = self._next_wanted()
            if wanted is None:
                self._read_timeout(READ_TIMEOUT_S)
                return
            request_id = self._next_id
            self._next_id = (self._next_id % 0xFFFF_FFFF) + 1
            port.write(encode_history_request(wanted.first, wanted.last, request_id))
            log.debug("%s: request %d for %d-%d (fails %d)", self.name, request_id, wanted.first,
                      wanted.last, wanted.fails)
            count = wanted.last - wanted.first + 1
            line_s = count * HISTORY_RECORD_BYTES * 10 / self.config.baudrate
            self._request = _Request(request_id, wanted.first, wanted.last, time.monotonic(),
                                     line_s, wanted.fails)
            self._request.have = sum(1 for seq in range(wanted.first, wanted.last + 1)
                                     if seq in self._have)
            self.frames_requested += count
        if self._request is None and not self._wanted:
            self._have.clear()  # the catch-up is done
        self._read_timeout(READ_TIMEOUT_S if self._request is None else IN_FLIGHT_READ_S)

    def _read_timeout(self, seconds: float) -> None:
        port = self._port
        if port is not None and port.timeout != seconds:
            port.timeout = seconds
