"""``frota check``: canonical records (JSON Lines, any order) → findings (JSON Lines on stdout).

The same engine the collector runs live (collector/rules). A file already in time order is
streamed through the engine in constant memory; a file out of order is read again and sorted
whole (stdin is first copied to a temporary file so it can be read twice).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from frota.errors import UserError

if TYPE_CHECKING:  # the engine's modules are imported when the command runs, not by ``frota``
    from collector.partitions import PartitionedEngine
    from collector.rules.profile import Profile

FLUSH_EVERY = 8192


def register(subparsers: Any) -> None:
    """Add ``frota check`` to the command line."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="check canonical records against the law (findings as JSON Lines)",
        description="Read canonical records (JSON Lines, a file or stdin, any order) and print "
        "the findings of the rules engine as JSON Lines, in (start, rule, vehicle, driver, id) "
        "order. Each trip is judged by its line's profile; --profile names the profile for "
        "records outside any trip.",
    )
    parser.add_argument("--registry", required=True, metavar="FILE",
                        help="the fleet registry (JSON, or YAML for .yaml/.yml)")
    parser.add_argument(
        "--profile", default="SP", metavar="NAME|PATH",
        help="profile for records outside any trip: a built-in profile (SP, BA, TO; default SP), "
        "or the path of an operator's copy of a profile, which replaces the built-in one of the "
        "same name (or, with extends = \"SP\", adds a profile under its own name)",
    )
    parser.add_argument(
        "--as-of", metavar="TS",
        help="'now' for open episodes and deadlines (RFC 3339; default: the latest record's "
        "time); records after it are ignored",
    )
    parser.add_argument("file", nargs="?", metavar="RECORDS",
                        help="canonical records, JSON Lines (default: stdin)")
    parser.set_defaults(func=run)


def _warn(message: str) -> None:
    print(f"frota check: warning: {message}", file=sys.stderr)


def resolve_profiles(value: str) -> tuple[dict[str, Profile], str]:
    """``--profile``: a built-in name, or a path to an operator's copy (→ profiles, default name)."""
    from collector.rules.profile import ProfileError, builtin_names, load_profiles

    try:
        names = builtin_names()
        if value in names:
            return load_profiles(), value
        if not Path(value).is_file():
            raise ProfileError(
                f"--profile {value!r} is neither a built-in profile ({', '.join(names)}) "
                "nor a profile file"
            )
        profiles = load_profiles([value], warn=_warn)
        return profiles, next(name for name, p in profiles.items() if p.source == value)
    except ProfileError as err:
        raise UserError(str(err)) from None


#: What cannot be judged for a vehicle the registry does not have (no seats, no capacity).
SEAT_RULES = "occupancy.standing, occupancy.overload, occupancy.index"


def _feed(engine: PartitionedEngine, path: Path, as_of: int | None, *, stream: bool,
          warned: set[str]) -> None:
    """Read, validate and queue every record of the file (flushing as it goes if ``stream``);
    warn once per vehicle missing from the registry (``warned``: those already warned of)."""
    import orjson

    from collector.rules.intake import parse_line
    from protocols.records import RecordError

    lines = engine.registry.lines
    vehicles = engine.registry.vehicles
    checked: set[str] = set()
    add = engine.add_one
    try:
        handle = path.open("rb")
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            try:
                ms, rec = parse_line(line)
            except orjson.JSONDecodeError as err:
                if not line.strip():
                    continue
                raise UserError(f"line {number} is not JSON: {err}") from None
            except RecordError as err:
                raise UserError(f"line {number}: {err}") from None
            if as_of is not None and ms > as_of:
                continue
            if rec["kind"] == "trip" and rec["line"] not in lines:
                raise UserError(
                    f"line {number}: unknown line {rec['line']!r} (not in the registry)"
                )
            vehicle = rec["vehicle"]
            if vehicle not in checked:          # once per vehicle: one look-up per record
                checked.add(vehicle)
                if vehicle not in vehicles and vehicle not in warned:
                    warned.add(vehicle)
                    _warn(f"vehicle {vehicle!r} (line {number}) is not in the registry: its "
                          f"seat-based rules cannot run ({SEAT_RULES})")
            add(ms, rec)
            if stream and not number % FLUSH_EVERY:
                engine.flush()


def check(registry_path: str, profile: str, records_path: Path,
          as_of_ts: str | None) -> list[dict[str, Any]]:
    """The findings for a records file (see the module's docstring)."""
    from collector.partitions import PartitionedEngine
    from collector.registry import RegistryError
    from collector.registry import load as load_registry
    from collector.rules.engine import LateRecordError
    from protocols.records import RecordError, ts_to_ms

    profiles, default = resolve_profiles(profile)
    try:
        registry = load_registry(registry_path, profiles)
    except RegistryError as err:
        raise UserError(str(err)) from None
    as_of: int | None = None
    if as_of_ts is not None:
        try:
            as_of = ts_to_ms(as_of_ts)
        except RecordError:
            raise UserError(f"--as-of {as_of_ts!r} is not an RFC 3339 timestamp") from None
    engine = PartitionedEngine(registry, profiles, default)   # one engine per operator
    warned: set[str] = set()
    try:
        _feed(engine, records_path, as_of, stream=True, warned=warned)
        return engine.findings(as_of)
    except LateRecordError:
        engine = PartitionedEngine(registry, profiles, default)
        _feed(engine, records_path, as_of, stream=False, warned=warned)
        return engine.findings(as_of)


def run(args: argparse.Namespace) -> int:
    """Check the records and print the findings."""
    from protocols.records import dumps

    if args.file is not None:
        found = check(args.registry, args.profile, Path(args.file), args.as_of)
    else:
        with tempfile.NamedTemporaryFile(prefix="frota-check-", suffix=".jsonl") as spool:
            shutil.copyfileobj(sys.stdin.buffer, spool)
            spool.flush()
            found = check(args.registry, args.profile, Path(spool.name), args.as_of)
    out = sys.stdout
    for finding in found:
        out.write(dumps(finding) + "\n")
    out.flush()
    return 0
