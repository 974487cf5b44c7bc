"""State profiles (SP, BA, TO) as data: loading, validation, local dates and driver periods.

A profile is a TOML file; the built-in ones are every file of ``collector/rules/profiles/`` (a new
state is a new file there, nothing else). An operator's copy passed by path either keeps a
built-in ``name`` and replaces that profile, or takes a new name with ``extends = "SP"`` and
inherits whatever it does not say. A copy missing whole rule sections (a copy made before a rule
was added) gets the built-in's sections, with a warning naming them. Validation names the file,
the section and the key: unknown rules or parameters, wrong types, a bad time zone or date.
"""

from __future__ import annotations

import dataclasses
import logging
import tomllib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from collector.rules.params import SEVERITIES

log = logging.getLogger(__name__)

PROFILE_DIR = Path(__file__).parent / "profiles"
#: The profile of records outside any trip unless told otherwise; listed first.
DEFAULT_PROFILE = "SP"
CO_DRIVER_MODES = ("declared", "available")


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file, section and key."""


@dataclass(frozen=True)
class RuleConfig:
    """One rule under one profile: whether it applies, its severity, citations and parameters."""

    rule: str
    applies: bool
    severity: str
    basis: tuple[str, ...]
    params: Any


@dataclass(frozen=True)
class DriverPeriod:
    """The federal driver-time rules in force from a date (docs/rules.md, "Federal law in every profile")."""

    start_ms: int
    law: str
    continuous_driving_ms: int | None
    break_rules: bool
    daily_rest_ms: int | None
    split_first_ms: int | None
    split_second_ms: int | None
    split_remainder_within_ms: int | None
    co_driver_available: bool


@dataclass(frozen=True)
class Profile:
    """A loaded profile."""

    name: str
    title: str
    authority: str
    timezone: str
    tz: ZoneInfo
    valid_from_ms: int
    valid_until_ms: int | None
    stop_kmh: float
    periods: tuple[DriverPeriod, ...]
    rules: dict[str, RuleConfig]
    source: str

    def period_at(self, ms: int) -> DriverPeriod:
        """The driver period in force at this instant."""
        found = self.periods[0]
        for period in self.periods:
            if period.start_ms <= ms:
                found = period
        return found

    def outside_validity(self, ms: int) -> bool:
        """True when the profile's text does not apply at this instant."""
        if ms < self.valid_from_ms:
            return True
        return self.valid_until_ms is not None and ms >= self.valid_until_ms

    def rule(self, rule_id: str) -> RuleConfig:
        """The configuration of one rule."""
        return self.rules[rule_id]


def local_midnight_ms(day: date, tz: ZoneInfo) -> int:
    """The first instant of a local calendar day, in ms since the epoch."""
    return int(datetime(day.year, day.month, day.day, tzinfo=tz).timestamp() * 1000)


_TOP_KEYS = {
    "name": str, "title": str, "authority": str, "timezone": str, "valid_from": str,
    "valid_until": str, "stop_kmh": float, "driver_periods": list, "rules": dict, "extends": str,
}
_PERIOD_KEYS = {
    "from": str, "law": str, "continuous_driving_h": float, "break_rules": bool,
    "daily_rest_h": float, "split_first_h": float, "split_second_h": float,
    "split_remainder_within_h": float, "co_driver_moving": str,
}


def _type_ok(value: Any, kind: Any) -> bool:
    """Whether a TOML value fits a parameter's declared type (int is fine for float)."""
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        return any(_type_ok(value, arm) for arm in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if origin is tuple:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
        )
    if kind is list:
        return isinstance(value, list)
    if kind is dict:
        return isinstance(value, dict)
    return False


def _type_name(kind: Any) -> str:
    names = {bool: "true or false", float: "a number", int: "an integer", str: "a string",
             list: "an array", dict: "a table"}
    if kind in names:
        return names[kind]
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in typing.get_args(kind) if a is not type(None))
    if origin is tuple:
        return "an array of strings"
    if origin is dict:
        return "a table of numbers"
    return str(kind)


def _date(where: str, value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ProfileError(f"{where}: {value!r} is not a date (YYYY-MM-DD)") from None


def _rule_config(where: str, rule_id: str, cls: type, section: Any) -> RuleConfig:
    if not isinstance(section, dict):
        raise ProfileError(f"{where}: rules.{rule_id!r} is not a table")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in section.items():
        if key in ("applies", "severity", "basis"):
            continue
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise ProfileError(
                f"{where}: rules.{rule_id!r}: unknown parameter {key!r} (known: {known})"
            )
        if not _type_ok(value, hints[key]):
            raise ProfileError(
                f"{where}: rules.{rule_id!r}.{key}: {value!r} is not {_type_name(hints[key])}"
            )
        values[key] = tuple(value) if isinstance(value, list) else value
    applies = section.get("applies")
    if not isinstance(applies, bool):
        raise ProfileError(f"{where}: rules.{rule_id!r}.applies must be true or false")
    severity = section.get("severity")
    if severity not in SEVERITIES:
        raise ProfileError(
            f"{where}: rules.{rule_id!r}.severity {severity!r} is not one of {', '.join(SEVERITIES)}"
        )
    basis = section.get("basis")
    if not isinstance(basis, list) or not all(isinstance(b, str) and b for b in basis):
        raise ProfileError(f"{where}: rules.{rule_id!r}.basis must be an array of citations")
    return RuleConfig(rule_id, applies, severity, tuple(basis), cls(**values))


def _hours_ms(value: float | None) -> int | None:
    return None if value is None else round(value * 3_600_000)


def _periods(where: str, raw: Any, tz: ZoneInfo) -> tuple[DriverPeriod, ...]:
    if not isinstance(raw, list) or not raw:
        raise ProfileError(f"{where}: driver_periods must be a non-empty array of tables")
    periods: list[DriverPeriod] = []
    for index, item in enumerate(raw):
        here = f"{where}: driver_periods[{index}]"
        if not isinstance(item, dict):
            raise ProfileError(f"{here} is not a table")
        for key, value in item.items():
            if key not in _PERIOD_KEYS:
                raise ProfileError(f"{here}: unknown key {key!r}")
            if not _type_ok(value, _PERIOD_KEYS[key]):
                raise ProfileError(f"{here}.{key}: {value!r} is not {_type_name(_PERIOD_KEYS[key])}")
        for key in ("from", "law"):
            if key not in item:
                raise ProfileError(f"{here}: missing {key!r}")
        mode = item.get("co_driver_moving", "declared")
        if mode not in CO_DRIVER_MODES:
            raise ProfileError(f"{here}.co_driver_moving: {mode!r} is not one of "
                               f"{', '.join(CO_DRIVER_MODES)}")
        start = local_midnight_ms(_date(f"{here}.from", item["from"]), tz)
        if periods and start <= periods[-1].start_ms:
            raise ProfileError(f"{here}.from: periods must be in increasing date order")
        periods.append(DriverPeriod(
            start_ms=start,
            law=item["law"],
            continuous_driving_ms=_hours_ms(item.get("continuous_driving_h")),
            break_rules=bool(item.get("break_rules", False)),
            daily_rest_ms=_hours_ms(item.get("daily_rest_h")),
            split_first_ms=_hours_ms(item.get("split_first_h")),
            split_second_ms=_hours_ms(item.get("split_second_h")),
            split_remainder_within_ms=_hours_ms(item.get("split_remainder_within_h")),
            co_driver_available=mode == "available",
        ))
    return tuple(periods)


def _rule_params() -> dict[str, type]:
    # imported here: the pipeline's rules import this module
    from collector.rules.pipeline import RULE_PARAMS

    return RULE_PARAMS


def parse_profile(doc: dict[str, Any], source: str) -> Profile:
    """Validate a complete profile document (a rule without a section does not apply)."""
    where = source
    for key, value in doc.items():
        if key not in _TOP_KEYS:
            raise ProfileError(f"{where}: unknown key {key!r}")
        if not _type_ok(value, _TOP_KEYS[key]):
            raise ProfileError(f"{where}: {key}: {value!r} is not {_type_name(_TOP_KEYS[key])}")
    for key in ("name", "timezone", "valid_from", "stop_kmh", "driver_periods", "rules"):
        if key not in doc:
            raise ProfileError(f"{where}: missing {key!r}")
    try:
        tz = ZoneInfo(doc["timezone"])
    except (ZoneInfoNotFoundError, ValueError):
        raise ProfileError(f"{where}: timezone {doc['timezone']!r} is not a time zone") from None
    known = _rule_params()
    rules_raw: dict[str, Any] = doc["rules"]
    for rule_id in rules_raw:
        if rule_id not in known:
            raise ProfileError(f"{where}: unknown rule {rule_id!r}")
    rules: dict[str, RuleConfig] = {}
    for rule_id, cls in known.items():
        if rule_id in rules_raw:
            rules[rule_id] = _rule_config(where, rule_id, cls, rules_raw[rule_id])
        else:   # a rule no profile file knows yet (a plug-in's): off until a profile turns it on
            rules[rule_id] = RuleConfig(rule_id, False, "report", (), cls())
    until = doc.get("valid_until")
    return Profile(
        name=doc["name"],
        title=doc.get("title", ""),
        authority=doc.get("authority", ""),
        timezone=doc["timezone"],
        tz=tz,
        valid_from_ms=local_midnight_ms(_date(f"{where}: valid_from", doc["valid_from"]), tz),
        valid_until_ms=None if until is None
        else local_midnight_ms(_date(f"{where}: valid_until", until), tz),
        stop_kmh=float(doc["stop_kmh"]),
        periods=_periods(where, doc["driver_periods"], tz),
        rules=rules,
        source=source,
    )


def builtin_names() -> tuple[str, ...]:
    """The built-in profiles: every file of the profiles folder, the default (SP) first, then
    by name."""
    return tuple(sorted((path.stem for path in PROFILE_DIR.glob("*.toml")),
                        key=lambda name: (name != DEFAULT_PROFILE, name)))


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as err:
        raise ProfileError(f"cannot read profile {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ProfileError(f"{path}: not TOML: {err}") from None


def _on_top_of(base: dict[str, Any], doc: dict[str, Any],
               inherit_top: bool) -> tuple[dict[str, Any], list[str]]:
    """``doc`` over ``base``: rule sections merged key by key, missing sections taken from the
    base (listed), top-level keys too when ``inherit_top``."""
    merged = {**base, **doc} if inherit_top else dict(doc)
    own = doc.get("rules")
    if not isinstance(own, dict):
        return merged, []
    rules: dict[str, Any] = {}
    missing: list[str] = []
    for rule_id, section in base.get("rules", {}).items():
        if rule_id not in own:
            rules[rule_id] = section
            missing.append(rule_id)
        elif isinstance(own[rule_id], dict) and isinstance(section, dict):
            rules[rule_id] = {**section, **own[rule_id]}
    for rule_id, section in own.items():
        rules.setdefault(rule_id, section)
    merged["rules"] = rules
    return merged, missing


def load_file(path: str | Path, warn: Callable[[str], None] | None = None) -> Profile:
    """Load and validate one profile file (TOML): a built-in's copy, or an ``extends`` copy."""
    path = Path(path)
    doc = _read(path)
    names = builtin_names()
    name = doc.get("name")
    extends = doc.get("extends")
    if extends is not None:
        if extends not in names:
            raise ProfileError(f"{path}: extends {extends!r}: not a built-in profile "
                               f"({', '.join(names)})")
        doc, _ = _on_top_of(_read(PROFILE_DIR / f"{extends}.toml"), doc, inherit_top=True)
    elif isinstance(name, str) and name not in names:
        raise ProfileError(f"{path}: name {name!r} is not a built-in profile ({', '.join(names)}); "
                           'a copy under a new name says which one it extends: extends = "SP"')
    elif isinstance(name, str):
        doc, missing = _on_top_of(_read(PROFILE_DIR / f"{name}.toml"), doc, inherit_top=False)
        if missing:
            (warn or log.warning)(
                f"{path}: no section for {', '.join(repr(m) for m in missing)}: "
                f"the built-in {name}'s used"
            )
    return parse_profile(doc, str(path))


def builtin(name: str) -> Profile:
    """One of the profiles shipped with Frota."""
    names = builtin_names()
    if name not in names:
        raise ProfileError(f"unknown profile {name!r} (built in: {', '.join(names)})")
    path = PROFILE_DIR / f"{name}.toml"
    profile = parse_profile(_read(path), str(path))
    if profile.name != name:
        raise ProfileError(f"{path}: name {profile.name!r} is not the file's name")
    return profile


def load_profiles(overrides: list[str] | tuple[str, ...] = (),
                  warn: Callable[[str], None] | None = None) -> dict[str, Profile]:
    """The built-in profiles, each replaced by an operator's copy (a path) of the same name, and
    the copies under new names (``extends``)."""
    profiles = {name: builtin(name) for name in builtin_names()}
    for path in overrides:
        copy = load_file(path, warn)
        profiles[copy.name] = copy
    return profiles
