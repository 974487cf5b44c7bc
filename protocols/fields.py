"""The formats of a record's scalar fields: vehicle ids, timestamps, integers (docs/records.md).

The one parser (``ts_to_ms``) and formatter (``ms_to_ts``) of record times, the one reading of
the host clock (``now_ms``), the one vehicle-id pattern, and the error for a record or a field
that breaks the format. ``protocols.records`` builds the record on these and re-exports them.
"""

from __future__ import annotations

import functools
import re
import time
from datetime import UTC, date, datetime
from typing import Any, Final


class RecordError(ValueError):
    """A record that does not follow the format; the message says which field and why."""


# --- vehicle ids ------------------------------------------------------------------------------

#: A vehicle id (the fleet's id for a bus, its plate): 1–64 ASCII letters, digits, ``_``, ``.``
#: or ``-``, starting with a letter or digit — safe as an MQTT topic level, a file name and a URL
#: path segment. The one pattern the agent's configuration, the registry, records, topics and the
#: HTTP API all check (docs/records.md).
VEHICLE_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_VEHICLE_ID: Final = re.compile(VEHICLE_ID_PATTERN)


def is_vehicle_id(value: object) -> bool:
    """True if ``value`` is a string that matches :data:`VEHICLE_ID_PATTERN` (whole string)."""
    return type(value) is str and _VEHICLE_ID.fullmatch(value) is not None


#: Memos of the vehicle ids, canonical timestamps and their minutes seen valid by the hot path
#: (a fleet has few vehicles, and its records share each second's timestamp). Plain dicts read
#: inline (an lru_cache wrapper call per field cost a fifth more per record), emptied when they
#: reach _MEMO_MAX entries; safe across threads (single dict operations).
_VEHICLE_MEMO: Final[dict[str, bool]] = {}
_TS_MEMO: Final[dict[str, int]] = {}
_MINUTE_MEMO: Final[dict[str, int]] = {}
_MEMO_MAX: Final = 4096


def _memo(memo: dict[str, Any], key: str, value: Any) -> Any:
    if len(memo) >= _MEMO_MAX:
        memo.clear()
    memo[key] = value
    return value


# --- timestamps -------------------------------------------------------------------------------

#: Largest integer a record may carry: JSON numbers are IEEE doubles (RFC 8785, I-JSON), so
#: larger integers cannot be written canonically.
MAX_SAFE_INT: Final = (1 << 53) - 1
_DAY_MS: Final = 86_400_000
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: The canonical form is ``YYYY-MM-DDTHH:MM:SS.sssZ`` (ASCII digits only); this is its minute.
_CANONICAL_MINUTE: Final = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):", re.ASCII)


#: The times a record may carry: 1970-01-01T00:00:00.000Z to 2100-12-31T23:59:59.999Z.
MIN_TS_MS: Final = 0
MAX_TS_MS: Final = 4_133_980_799_999


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about hostile input."""
    text = repr(value) if not isinstance(value, str | bytes) or len(value) <= limit \
        else repr(value[:limit])
    return text if len(text) <= limit + 3 else text[:limit] + "…"


@functools.lru_cache(maxsize=1024)
def _date_prefix(day: int) -> str:
    """``YYYY-MM-DDT`` of a day counted from 1970-01-01, for any day (cached: records share few
    days). Hand-rolled (H. Hinnant's civil-from-days) because ``datetime`` stops at years 1 and
    9999, and the formatter must write whatever a store may hold; years outside 0–9999 get
    ISO 8601's expanded form, a sign and five digits or more (``+10000-01-01``)."""
    z = day + 719_468
    era, doe = divmod(z, 146_097)
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    mday = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    text = f"{year:04d}" if 0 <= year <= 9999 else f"{year:+06d}"
    return f"{text}-{month:02d}-{mday:02d}T"


def ms_to_ts(ms: int) -> str:
    """Milliseconds since the Unix epoch (UTC) → ``YYYY-MM-DDTHH:MM:SS.sssZ``.

    The one formatter of record times; total: it writes any integer (see ``_date_prefix``).
    """
    day, in_day = divmod(int(ms), _DAY_MS)
    seconds, millis = divmod(in_day, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{_date_prefix(day)}{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"


def _parse_canonical_ts(ts: str) -> int | None:
    """ms of a timestamp in the canonical form, else None. The minute's start is remembered
    (``_MINUTE_MEMO``): the seconds of a minute then cost two slices and two ``int``."""
    if len(ts) != 24 or ts[19] != "." or ts[23] != "Z":
        return None
    second, millis = ts[17:19], ts[20:23]
    if not (second.isascii() and second.isdigit() and millis.isascii() and millis.isdigit()
            and second < "60"):
        return None
    minute_ms = _MINUTE_MEMO.get(ts[:17])
    if minute_ms is None:
        match = _CANONICAL_MINUTE.fullmatch(ts[:17])
        if match is None:
            return None
        year, month, day, hour, minute = map(int, match.groups())
        if hour > 23 or minute > 59:
            return None
        if not 1970 <= year <= 2100:
            return None  # the general path says why
        try:
            days = date(year, month, day).toordinal() - _EPOCH_ORDINAL
        except ValueError:
            return None
        minute_ms = _memo(_MINUTE_MEMO, ts[:17], ((days * 24 + hour) * 60 + minute) * 60_000)
    return minute_ms + int(second) * 1000 + int(millis)


def _canonical_ts_ms(ts: str) -> int | None:
    """:func:`_parse_canonical_ts`, remembered in _TS_MEMO."""
    ms = _TS_MEMO.get(ts)
    if ms is None:
        ms = _parse_canonical_ts(ts)
        if ms is not None:
            _memo(_TS_MEMO, ts, ms)
    return ms


def ts_to_ms(ts: str) -> int:
    """RFC 3339 (any offset, any fraction) → milliseconds since the Unix epoch; RecordError if
    bad or outside 1970–2100 (``MIN_TS_MS``–``MAX_TS_MS``, in UTC).

    The one parser of record times. Fractions below the millisecond are truncated.
    """
    if type(ts) is str and len(ts) == 24:
        ms = _canonical_ts_ms(ts)
        if ms is not None:
            return ms
    if not isinstance(ts, str) or not 19 <= len(ts) <= 64:
        raise RecordError(f"ts: {shown(ts)} is not an RFC 3339 timestamp")
    text = ts.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as err:
        raise RecordError(f"ts: {shown(ts)} is not an RFC 3339 timestamp") from err
    if dt.tzinfo is None:
        raise RecordError(f"ts: {shown(ts)} has no UTC offset")
    try:
        delta = dt - _EPOCH
    except OverflowError:  # an offset that takes it past year 1 or 9999
        delta = None
    ms = None if delta is None else \
        (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if ms is None or not MIN_TS_MS <= ms <= MAX_TS_MS:
        raise RecordError(f"ts: {shown(ts)} is outside 1970-2100 (UTC)")
    return ms


def now_ms() -> int:
    """The host's wall clock in ms since the epoch: the one place a process reads it (record
    times come from devices; this is for arrival times, "now" of deadlines and diagnostics)."""
    return time.time_ns() // 1_000_000
