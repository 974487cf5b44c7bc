"""GPS receivers: NMEA 0183 sentences (RMC, GGA, VTG) → ``position`` records (firmware-notes/nmea.md).

Line-framed ASCII at 4800 or 9600 baud. Each line is checked (``$``, ``*HH`` checksum over the
characters between them), classified by its address field, and parsed with pynmea2. The RMC, GGA
and VTG sentences of one fix epoch (same UTC time of day) become one ``position`` record; its
``ts`` is the receiver's date (from RMC) and time, its ``raw`` the epoch's sentences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from typing import Any, Final

import pynmea2
from pynmea2.nmea_utils import dm_to_sd

from protocols.base import DecoderStats
from protocols.records import Record, make_record, ms_to_ts

#: Talkers of satellite receivers: GPS, multi-GNSS, GLONASS, Galileo, BeiDou (BD and GB), QZSS, NavIC.
GNSS_TALKERS: Final = frozenset({"GP", "GN", "GL", "GA", "BD", "GB", "GQ", "GI"})
#: The sentences used (RMC, GGA, VTG carry the fix; ZDA dates GGA-only receivers); other
#: sentences of a GNSS talker are counted as unused.
USED_SENTENCES: Final = frozenset({"RMC", "GGA", "VTG", "ZDA"})
#: NMEA 0183 allows 82 characters; some receivers send longer lines, anything past this is noise.
MAX_LINE: Final = 256
#: Sentences one fix epoch keeps (its RMC, GGA, VTG from every talker; a receiver repeating
#: one time of day without completing the epoch would otherwise grow it without end).
MAX_EPOCH_SENTENCES: Final = 16
#: One knot in km/h (1852 m per hour).
KNOT_KMH: Final = 1.852
DAY_MS: Final = 86_400_000
_HALF_DAY_MS: Final = DAY_MS // 2
#: GGA fix quality: 1 GPS, 2 DGPS, 3 PPS, 4 RTK, 5 float RTK, 6 dead reckoning; 0 invalid,
#: 7 manual input and 8 simulator are not a measured position.
_GGA_FIX_QUALITIES: Final = frozenset({1, 2, 3, 4, 5, 6})
#: RMC/VTG mode indicator (NMEA 2.3+): N is "data not valid" even when the status says A.
_VOID_MODES: Final = frozenset({"N"})
#: pynmea2 raises several exception types (and can raise on attribute access): all stop here.
_PARSE_ERRORS: Final = (ValueError, TypeError, AttributeError, IndexError, KeyError, ArithmeticError)
_CHECKSUM_RE: Final = re.compile(rb"\*([0-9A-Fa-f]{2})$")
_LINE_END_RE: Final = re.compile(rb"[\r\n]")


class SentenceRejected(Exception):  # noqa: N818 - a verdict on data, not a program error
    """A line that gives no fix; ``reason`` is the stats counter it goes to."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Fix:
    """What one RMC, GGA or VTG sentence says (fields it does not carry are None)."""

    sentence: str
    talker: str
    valid: bool
    tod_ms: int | None = None
    date: date | None = None
    lat: float | None = None
    lon: float | None = None
    kmh: float | None = None
    course: float | None = None


def checksum(body: bytes) -> int:
    """XOR of the bytes between ``$`` (or ``!``) and ``*`` — the NMEA 0183 checksum."""
    value = 0
    for byte in body:
        value ^= byte
    return value


def _tod_ms(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, time):
        raise SentenceRejected("malformed", f"time {value!r}")
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000


def _coordinate(value: str, hemisphere: str, positive: str, negative: str, limit: float) -> float:
    try:
        degrees = float(dm_to_sd(value))
    except _PARSE_ERRORS as err:
        raise SentenceRejected("malformed", f"coordinate {value!r}") from err
    minutes = value[value.find(".") - 2 :]  # dm_to_sd accepted the form: minutes are 'mm.mmm'
    if hemisphere not in (positive, negative) or not 0 <= degrees <= limit or minutes >= "60":
        raise SentenceRejected("malformed", f"coordinate {value!r} {hemisphere!r}")
    return -degrees if hemisphere == negative else degrees


def _position(msg: Any) -> tuple[float, float]:
    if not msg.lat or not msg.lon:
        raise SentenceRejected("malformed", "valid fix without a position")
    lat = _coordinate(msg.lat, msg.lat_dir, "N", "S", 90.0)
    lon = _coordinate(msg.lon, msg.lon_dir, "E", "W", 180.0)
    return lat, lon


def _number(value: Any, what: str, hi: float) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        raise SentenceRejected("malformed", f"{what} {value!r}")
    number = float(value)
    if not 0 <= number <= hi:
        raise SentenceRejected("malformed", f"{what} {number!r} out of range")
    return number


def _rmc(msg: Any, talker: str) -> Fix:
    tod = _tod_ms(msg.timestamp)
    mode = msg.mode_indicator  # '' when the receiver predates NMEA 2.3
    valid = msg.status == "A" and mode not in _VOID_MODES and tod is not None
    if not valid:
        return Fix("RMC", talker, False, tod)
    day = msg.datestamp
    if day is not None and not isinstance(day, date):
        raise SentenceRejected("malformed", f"date {day!r}")
    lat, lon = _position(msg)
    knots = _number(msg.spd_over_grnd, "speed", 1000)
    course = _number(msg.true_course, "course", 360)
    kmh = None if knots is None else knots * KNOT_KMH
    return Fix("RMC", talker, True, tod, day, lat, lon, kmh, course)


def _gga(msg: Any, talker: str) -> Fix:
    tod = _tod_ms(msg.timestamp)
    quality = msg.gps_qual
    if quality is not None and not isinstance(quality, int):
        raise SentenceRejected("malformed", f"fix quality {quality!r}")
    satellites = msg.num_sats
    if quality not in _GGA_FIX_QUALITIES or tod is None or satellites in ("0", "00"):
        return Fix("GGA", talker, False, tod)  # no fix, or one from no satellite (as gpsd)
    lat, lon = _position(msg)
    return Fix("GGA", talker, True, tod, None, lat, lon)


def _vtg(msg: Any, talker: str) -> Fix:
    mode = msg.faa_mode
    course = _number(msg.true_track, "course", 360)
    kmh = _number(msg.spd_over_grnd_kmph, "speed", 2000)
    if kmh is None:
        knots = _number(msg.spd_over_grnd_kts, "speed", 1000)
        kmh = None if knots is None else knots * KNOT_KMH
    valid = mode not in _VOID_MODES and (kmh is not None or course is not None)
    return Fix("VTG", talker, valid, kmh=kmh, course=course)


def _zda(msg: Any, talker: str) -> Fix:
    tod = _tod_ms(msg.timestamp)
    try:
        day = msg.datestamp
    except _PARSE_ERRORS:
        day = None
    if tod is None or not isinstance(day, date):
        return Fix("ZDA", talker, False, tod)
    if not 1980 <= day.year <= 2099:  # before GPS began, or a four-digit year gone wrong
        raise SentenceRejected("malformed", f"ZDA year {day.year}")
    return Fix("ZDA", talker, True, tod, day)


_PARSERS = {"RMC": _rmc, "GGA": _gga, "VTG": _vtg, "ZDA": _zda}


def parse_sentence(line: bytes) -> Fix:
    """One sentence (``$`` to checksum, no line end) → its Fix; SentenceRejected says why not."""
    match = _CHECKSUM_RE.search(line)
    if match is None or len(line) < 4:
        raise SentenceRejected("crc_failures", "no checksum")
    body = line[1 : match.start()]
    if checksum(body) != int(match.group(1), 16):
        raise SentenceRejected("crc_failures", f"checksum {match.group(1).decode()}")
    if line[:1] == b"!":
        raise SentenceRejected("skipped", "encapsulated (AIS) sentence")
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError as err:
        raise SentenceRejected("malformed", "not ASCII") from err
    address = text[1:].split(",", 1)[0].upper()
    if address.startswith("P"):
        raise SentenceRejected("skipped", f"proprietary sentence {address}")
    if len(address) < 5 or not address.isalnum():
        raise SentenceRejected("malformed", f"address field {address!r}")
    talker, kind = address[:2], address[2:]
    if talker not in GNSS_TALKERS:
        raise SentenceRejected("skipped", f"not a GNSS talker: {address}")
    if kind not in USED_SENTENCES:
        raise SentenceRejected("unused", address)
    try:
        msg = pynmea2.parse(text, check=True)
        return _PARSERS[kind](msg, talker)
    except SentenceRejected:
        raise
    except _PARSE_ERRORS as err:
        raise SentenceRejected("malformed", f"{address}: {err}") from err


@dataclass
class NmeaStats(DecoderStats):
    """DecoderStats plus what is particular to GPS: void fixes, undated fixes, unused sentences."""

    void_fixes: int = 0
    undated: int = 0
    unused: int = 0

    def summary(self) -> dict[str, int]:
        """The counters as a dict, the NMEA ones included."""
        return {
            **super().summary(),
            "void_fixes": self.void_fixes,
            "undated": self.undated,
            "unused": self.unused,
        }


@dataclass
class _Epoch:
    tod_ms: int
    lines: list[bytes] = field(default_factory=list)
    fixes: dict[str, Fix] = field(default_factory=dict)


def _day_ms(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()) * 1000


class NmeaDecoder:
    """Stream decoder: NMEA bytes → one ``position`` record per valid fix epoch; never raises."""

    def __init__(self, vehicle: str) -> None:
        self.vehicle = vehicle
        #: The counters, with their GPS-specific fields.
        self.stats = NmeaStats()
        self._buf = bytearray()
        self._epoch: _Epoch | None = None
        #: The last valid RMC's (or ZDA's) date and time, ms since the epoch: dates GGA-only fixes.
        self._anchor_ms: int | None = None

    def feed(self, data: bytes) -> list[Record]:
        """Consume bytes; return the position records of the epochs they complete."""
        self.stats.bytes_in += len(data)
        self._buf += data
        out: list[Record] = []
        parts = _LINE_END_RE.split(bytes(self._buf))
        for part in parts[:-1]:
            self._line(part, out)
        tail = parts[-1]
        if len(tail) > MAX_LINE:
            start = max(tail.rfind(b"$"), tail.rfind(b"!"))
            keep = tail[start:] if start >= 0 and len(tail) - start <= MAX_LINE else b""
            self.stats.bytes_dropped += len(tail) - len(keep)
            tail = keep
        self._buf = bytearray(tail)
        return out

    def finish(self) -> list[Record]:
        """End of input: the last pending epoch's record (an unterminated line is dropped)."""
        if self._buf:
            self.stats.bytes_dropped += len(self._buf)
            self.stats.reject("unterminated", bytes(self._buf))
            self._buf.clear()
        out: list[Record] = []
        self._flush(out)
        return out

    def set_time(self, ts_ms: int) -> None:
        """The clock hook: unused, fixes carry the receiver's UTC time."""

    def _line(self, line: bytes, out: list[Record]) -> None:
        if not line.strip():
            return
        start = max(line.rfind(b"$"), line.rfind(b"!"))
        if start < 0:
            self.stats.bytes_dropped += len(line)
            return
        if start:
            self.stats.bytes_dropped += start
        sentence = line[start:].rstrip()
        try:
            fix = parse_sentence(sentence)
        except SentenceRejected as rejected:
            self._count(rejected.reason, sentence)
            return
        self.stats.frames += 1
        self._add(fix, sentence, out)

    def _count(self, reason: str, sentence: bytes) -> None:
        if reason != "crc_failures":
            self.stats.frames += 1  # framed and checked, but no fix in it
        if reason == "crc_failures":
            self.stats.crc_failures += 1
            self.stats.reject("checksum", sentence)
        elif reason == "malformed":
            self.stats.malformed += 1
            self.stats.reject("malformed", sentence)
        elif reason == "unused":
            self.stats.unused += 1
        else:
            self.stats.skipped += 1

    def _add(self, fix: Fix, sentence: bytes, out: list[Record]) -> None:
        if not fix.valid and fix.sentence in ("RMC", "GGA"):
            self.stats.void_fixes += 1
        if fix.sentence == "ZDA":
            if fix.valid and fix.date is not None and fix.tod_ms is not None:
                self._anchor_ms = _day_ms(fix.date) + fix.tod_ms
            return
        if fix.sentence == "VTG":
            epoch = self._epoch
            if epoch is not None and "VTG" not in epoch.fixes:
                epoch.fixes["VTG"] = fix
                epoch.lines.append(sentence)
            return
        if fix.tod_ms is None:
            return
        epoch = self._epoch
        if epoch is not None and epoch.tod_ms != fix.tod_ms:
            self._flush(out)
            epoch = None
        if epoch is None:
            epoch = self._epoch = _Epoch(fix.tod_ms)
        if len(epoch.lines) >= MAX_EPOCH_SENTENCES:
            self.stats.skipped += 1  # the epoch is full: more of the same time adds nothing
            return
        # A second RMC or GGA of the same epoch (GPGGA and GLGGA from one receiver, a clock
        # that did not advance) joins the raw; the first one gives the values.
        epoch.fixes.setdefault(fix.sentence, fix)
        epoch.lines.append(sentence)
        if "RMC" in epoch.fixes and "GGA" in epoch.fixes:
            self._flush(out)

    def _flush(self, out: list[Record]) -> None:
        epoch, self._epoch = self._epoch, None
        if epoch is None:
            return
        rmc, gga, vtg = (epoch.fixes.get(name) for name in ("RMC", "GGA", "VTG"))
        ts_ms: int | None = None
        if rmc is not None and rmc.valid and rmc.date is not None:
            ts_ms = self._anchor_ms = _day_ms(rmc.date) + epoch.tod_ms
        source = rmc if rmc is not None and rmc.valid else gga if gga is not None and gga.valid else None
        if source is None:
            return
        if ts_ms is None:
            ts_ms = self._dated(epoch.tod_ms)
            if ts_ms is None:
                self.stats.undated += 1
                self.stats.reject("undated", b"\r\n".join(epoch.lines))
                return
        motion = [f for f in (rmc, vtg) if f is not None and f.valid]
        kmh = next((f.kmh for f in motion if f.kmh is not None), None)
        course = next((f.course for f in motion if f.course is not None), None)
        assert source.lat is not None  # a valid RMC/GGA has both
        assert source.lon is not None
        out.append(
            make_record(
                "position",
                self.vehicle,
                ms_to_ts(ts_ms),
                lat=round(source.lat, 7),
                lon=round(source.lon, 7),
                kmh=None if kmh is None else round(kmh, 2),
                course=None if course is None else round(course, 2),
                raw=b"".join(line + b"\r\n" for line in epoch.lines).hex(),
            )
        )

    def _dated(self, tod_ms: int) -> int | None:
        """A time of day → a full time, on the last RMC's date, across midnight either way."""
        if self._anchor_ms is None:
            return None
        anchor_tod = self._anchor_ms % DAY_MS
        ts_ms = self._anchor_ms - anchor_tod + tod_ms
        if tod_ms < anchor_tod - _HALF_DAY_MS:
            ts_ms += DAY_MS
        elif tod_ms > anchor_tod + _HALF_DAY_MS:
            ts_ms -= DAY_MS
        return ts_ms
