"""``frota collector enter incident|report|trip`` (an operator's entry, stored like any record) and
``frota collector findings`` (the findings the running collector keeps), added to ``frota collector``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from frota.errors import UserError
from protocols.records import RecordError, dumps, ts_to_ms, validate

CAUSES = ("breakdown", "accident", "accident_victims", "force_majeure", "road_blocked", "other")


def add_subcommands(sub: Any) -> None:
    """Add ``enter`` and ``findings`` under ``frota collector``."""
    enter = sub.add_parser(
        "enter",
        help="enter an incident, a report or a trip start/end for a vehicle (an operator record)",
        description="Store an operator's record (agent 'operator', the next seq) in the "
        "collector's database; the running collector's rules take it into account.",
    )
    what = enter.add_subparsers(dest="entry", metavar="KIND")
    what.required = True
    incident = what.add_parser("incident", help="an incident (breakdown, accident, ...)",
                               description="Enter an incident of a vehicle.")
    _common(incident)
    incident.add_argument("--cause", required=True, choices=CAUSES, help="what happened")
    incident.add_argument("--carrier-fault", action="store_true",
                          help="the carrier is at fault (assistance to passengers is due)")
    report = what.add_parser("report", help="an obligation met (answers a deadline)",
                             description="Enter a report answering a deadline finding (--finding) "
                             "or an incident (--incident-ts).")
    _common(report)
    answer = report.add_mutually_exclusive_group(required=True)
    answer.add_argument("--finding", metavar="ID", help="the id of the deadline it answers")
    answer.add_argument("--incident-ts", metavar="TS", help="the time of the incident it answers")
    report.add_argument("--to", required=True, metavar="WHO",
                        help="the authority reported to, or 'passengers' for assistance given")
    trip = what.add_parser(
        "trip", help="a trip's start or end, where no console sends it (an FMS-only bus)",
        description="Enter a trip's start or end for a vehicle whose trips no console reports "
        "(a bus read on FMS/CAN: TCO1 carries no trips), as the driver's console would: the "
        "rules take the trip's line and profile from it (docs/rules.md).")
    trip.add_argument("event", choices=("start", "end"), help="the trip starts or ends")
    _common(trip)
    trip.add_argument("--trip", required=True, metavar="ID", help="the trip's id")
    trip.add_argument("--line", required=True, metavar="ID", help="the registry line it runs")
    trip.add_argument("--scheduled", metavar="TS",
                      help="the scheduled departure (RFC 3339; start only)")
    withdrawal = what.add_parser(
        "withdrawal", help="withdraw an earlier operator entry (a later signed entry naming it)",
        description="Withdraw the vehicle's operator entry SEQ (an incident, a report, a trip "
        "entered by mistake) by a later signed entry naming it, with a reason: the entry stays "
        "in the store and its chain, the rules stop counting it (a deadline its report closed "
        "opens again). An entry is never edited in place (docs/records.md).")
    _source(withdrawal)
    withdrawal.add_argument("--vehicle", required=True, metavar="ID", help="the vehicle id")
    withdrawal.add_argument("--seq", required=True, type=int, metavar="N",
                            help="the seq of the operator entry withdrawn")
    withdrawal.add_argument("--reason", required=True, metavar="TEXT",
                            help="why (1-200 characters), recorded in the signed entry")
    withdrawal.add_argument("--by", metavar="NAME", default=None,
                            help="who withdraws it, recorded in the signed entry (default: the "
                            "OS user)")
    enter.set_defaults(func=run_enter)

    findings = sub.add_parser(
        "findings",
        help="print the stored findings as JSON Lines",
        description="Print the findings the collector computed (as of its last evaluation, "
        "printed on stderr) as JSON Lines in (start, rule, vehicle, driver, id) order.",
    )
    _source(findings)
    findings.add_argument("--vehicle", metavar="ID", help="only this vehicle's findings")
    findings.add_argument("--driver", metavar="ID",
                          help="only this driver's findings (registry id; or card number with --config)")
    findings.add_argument("--since", metavar="TS",
                          help="only findings still open or ending at or after this time "
                          "(RFC 3339, or a date: a day in the vehicle's local time)")
    findings.add_argument("--local", action="store_true",
                          help="one line per finding for people, in local time (each finding's "
                          "profile's time zone) instead of JSON Lines in UTC")
    findings.set_defaults(func=run_findings)

    from frota.commands.collector_stats import add_subcommand

    add_subcommand(sub)  # stats


def _source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", metavar="FILE", help="the collector's TOML configuration")
    source.add_argument("--db", metavar="PATH", help="a SQLite database file (or a postgresql:// DSN)")


def _common(parser: argparse.ArgumentParser) -> None:
    _source(parser)
    parser.add_argument("--vehicle", required=True, metavar="ID", help="the vehicle id")
    parser.add_argument("--ts", required=True, metavar="TS", help="when (RFC 3339)")
    parser.add_argument("--by", metavar="NAME", default=None,
                        help="who enters it, recorded in the signed entry (default: the OS user)")


def _canonical_ts(option: str, value: str) -> str:
    from protocols.records import ms_to_ts

    try:
        return ms_to_ts(ts_to_ms(value))
    except RecordError:
        raise UserError(
            f"{option} {value!r} is not an RFC 3339 timestamp (e.g. 2026-03-02T14:10:00Z)"
        ) from None


def _open(args: argparse.Namespace) -> tuple[Any, Any]:
    """(store, registry or None) from --config or --db."""
    from collector import registry
    from collector.store import StoreError, open_store
    from frota.commands.collector import _config

    reg = None
    if args.db is not None:
        url = args.db
    else:
        config = _config(args.config)
        url = config.database.url
        try:
            reg = registry.load(config.registry)
        except registry.RegistryError as err:
            raise UserError(f"fleet registry: {err}") from err
    try:
        return open_store(url, create=False), reg
    except StoreError as err:
        raise UserError(str(err)) from err


def _seal(config: Any) -> Any:
    """The collector's signing key from the configuration's ``[trust]`` (None without one)."""
    from collector.entries import seal_of
    from protocols.identity import IdentityError

    trust = config.trust
    if trust is None:
        return None
    try:
        return seal_of(trust.key_file, trust.cert_file, trust.ca_file)
    except (IdentityError, OSError) as err:
        raise UserError(f"trust: the collector's key: {err}") from err


def _unsigned_warning() -> None:
    sys.stderr.write("warning: entry stored unsigned (no collector key: give --config with a "
                     "[trust] section); frota verify reports it as unsigned\n")


def run_withdraw(args: argparse.Namespace) -> int:
    """Store a withdrawal of an operator entry and print it as stored."""
    from collector.entries import withdraw
    from protocols.records import MAX_REASON_CHARS, now_ms

    if args.seq < 1:
        raise UserError(f"--seq {args.seq}: an entry's seq is 1 or more")
    reason = args.reason.strip()
    if not reason or len(reason) > MAX_REASON_CHARS:
        raise UserError(f"--reason: say why in 1-{MAX_REASON_CHARS} characters")
    return _store_entry(args, lambda store, reg, by, seal: withdraw(
        store, reg, args.vehicle, args.seq, reason, now_ms(), by, seal))


def _store_entry(args: argparse.Namespace,
                 store_it: Callable[[Any, Any, str, Any], Any]) -> int:
    """Check ``--by`` (the OS user by default), open the store (and registry) and the
    collector's seal (``--config``), store through ``store_it(store, registry, by, seal)`` and
    print the entry as stored (warning when unsigned)."""
    from collector.entries import EntryError, check_by, os_user
    from collector.store import StoreError
    from frota.commands.collector import _config

    by = args.by if args.by is not None else os_user()
    try:
        check_by(by)
    except EntryError as err:
        raise UserError(f"--by: {err}") from None
    seal = _seal(_config(args.config)) if args.config is not None else None
    store, reg = _open(args)
    try:
        stored = store_it(store, reg, by, seal)
    except (StoreError, EntryError) as err:
        raise UserError(str(err)) from err
    finally:
        store.close()
    if seal is None:
        _unsigned_warning()
    sys.stdout.write(dumps(stored) + "\n")
    return 0


def run_enter(args: argparse.Namespace) -> int:
    """Store the operator's record and print it as stored."""
    from protocols.records import now_ms

    if args.entry == "withdrawal":
        return run_withdraw(args)

    rec: dict[str, Any] = {"vehicle": args.vehicle, "ts": _canonical_ts("--ts", args.ts),
                           "kind": args.entry}
    if args.entry == "incident":
        rec["cause"] = args.cause
        rec["carrier_fault"] = bool(args.carrier_fault)
    elif args.entry == "trip":
        rec.update(event=args.event, trip=args.trip, line=args.line)
        if args.scheduled is not None:
            if args.event != "start":
                raise UserError("--scheduled is the departure time: give it with 'start' only")
            rec["scheduled"] = _canonical_ts("--scheduled", args.scheduled)
    else:
        if args.finding is not None:
            rec["finding"] = args.finding
        else:
            rec["incident_ts"] = _canonical_ts("--incident-ts", args.incident_ts)
        rec["to"] = args.to
    try:
        validate(rec)
    except RecordError as err:
        raise UserError(str(err)) from None
    from collector.entries import enter

    def store_it(store: Any, reg: Any, by: str, seal: Any) -> Any:
        if reg is not None and args.vehicle not in reg.vehicles:
            raise UserError(f"vehicle {args.vehicle!r} is not in the fleet registry")
        if reg is not None and args.entry == "trip" and args.line not in reg.lines:
            raise UserError(f"line {args.line!r} is not in the fleet registry")
        if args.entry == "report" and args.finding is not None:
            _check_deadline(store, args.finding, args.vehicle)
        return enter(store, None, rec, now_ms(), by, seal)

    return _store_entry(args, store_it)


#: The rules whose findings are deadlines a report answers.
DEADLINES = ("trip.assistance_due", "trip.report_due", "trip.accident_data")


def _check_deadline(store: Any, finding_id: str, vehicle: str) -> None:
    """A report names a deadline of its own vehicle that the collector found: refuse anything
    else (a typo would otherwise be stored and answer nothing)."""
    from collector import findings
    from protocols.records import ms_to_ts

    found, as_of = findings.load(store)
    when = "the collector has not evaluated findings yet" if as_of is None \
        else f"none as of {ms_to_ts(as_of)}"
    match = next((f for f in found if f["id"] == finding_id), None)
    if match is None:
        raise UserError(f"--finding {finding_id!r}: no such finding ({when})")
    if match["vehicle"] != vehicle:
        raise UserError(f"--finding {finding_id!r} is a finding of vehicle {match['vehicle']!r}, "
                        f"not {vehicle!r}")
    if match["severity"] != "deadline":
        raise UserError(f"--finding {finding_id!r} is {match['rule']} ({match['severity']}), not "
                        f"a deadline: a report answers {', '.join(DEADLINES)}")


def store_operator_record(config_file: str, rec: dict[str, Any], by: str) -> dict[str, Any]:
    """Validate, sign and store an operator's record in the database of the collector configured
    by ``config_file`` (agent ``operator``, the next seq, ``by``), as ``frota collector enter``
    does; returns it as stored. UserError, EntryError or StoreError when it cannot be."""
    from collector.entries import enter
    from frota.commands.collector import _config
    from protocols.records import now_ms

    config = _config(config_file)
    seal = _seal(config)
    store = open_store_of(config.database.url)
    try:
        stored: dict[str, Any] = enter(store, None, rec, now_ms(), by, seal)
        return stored
    finally:
        store.close()


def open_store_of(url: str) -> Any:
    """The existing store at ``url``."""
    from collector.store import open_store

    return open_store(url, create=False)


def run_findings(args: argparse.Namespace) -> int:
    """Print the stored findings."""
    from collector import findings
    from collector.localtime import (
        LocalTimeError,
        finding_profile,
        finding_text,
        home_profile,
        person_time_ms,
    )
    from collector.rules.profile import load_profiles
    from collector.store import StoreError
    from protocols.records import ms_to_ts

    store, reg = _open(args)
    profiles = load_profiles()
    try:
        since = None if args.since is None else person_time_ms(
            args.since, home_profile(args.vehicle, reg, profiles).tz)
        found, as_of = findings.load(store, args.vehicle, since)
    except LocalTimeError as err:
        raise UserError(f"--since {err}") from None
    except StoreError as err:
        raise UserError(str(err)) from err
    finally:
        store.close()
    if args.driver is not None:
        # a card number names the driver through the registry (with --config)
        driver = args.driver if reg is None else reg.driver_id(args.driver)
        found = [one for one in found if one.get("driver") == driver]
        if reg is not None and driver not in reg.drivers:
            print(f"warning: driver {args.driver!r} is in the registry neither as an id nor as "
                  "a card number", file=sys.stderr)
        elif reg is None and not found:
            print(f"note: with --db, --driver matches a registry id only; to find driver "
                  f"{args.driver!r} by card number give --config", file=sys.stderr)
    out = sys.stdout
    for one in found:
        if args.local:
            out.write(finding_text(one, finding_profile(one, reg, profiles)) + "\n")
        else:
            out.write(dumps(one) + "\n")
    out.flush()
    when = "never evaluated" if as_of is None else f"as of {ms_to_ts(as_of)}"
    print(f"{len(found)} findings, {when}", file=sys.stderr)
    return 0
