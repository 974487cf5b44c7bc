"""The command line of ``frota sim fleet`` (simulators/fleet.py; docs/deployment.md)."""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from protocols.uplink import check_broker_url
from simulators.errors import SimulatorError
from simulators.fleet import Fleet, FleetReport, FleetSettings, registry

log = logging.getLogger(__name__)


def _worker(settings: FleetSettings, out: Connection) -> None:
    try:
        out.send(Fleet(settings).run())
    except Exception as err:  # said by the parent, which raises it as a SimulatorError
        log.exception("fleet worker %d failed", settings.share[0])
        out.send(f"{type(err).__name__}: {err}")
    finally:
        out.close()


def run_workers(settings: FleetSettings, workers: int) -> FleetReport:
    """Run the fleet split over ``workers`` processes (one: in this process); the merged
    report. SimulatorError when a worker failed."""
    if workers <= 1:
        return Fleet(settings).run()
    context = multiprocessing.get_context("spawn")
    procs = []
    for index in range(workers):
        mine, theirs = context.Pipe(duplex=False)
        share = FleetSettings(**{**settings.__dict__, "share": (index, workers)})
        proc = context.Process(target=_worker, args=(share, theirs), name=f"fleet-{index}")
        proc.start()
        theirs.close()
        procs.append((proc, mine))
    report = FleetReport(0, settings.duration_s)
    failures = []
    for proc, pipe in procs:
        try:
            got = pipe.recv()
        except EOFError:
            got = f"worker {proc.name} ended without a report"
        proc.join()
        if isinstance(got, FleetReport):
            report.merge(got)
        else:
            failures.append(str(got))
    if failures:
        raise SimulatorError("; ".join(failures))
    return report


def register_sim(subparsers: Any) -> None:
    """Add ``frota sim fleet``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "fleet", help="N simulated agents on the wire: load and end-to-end latency",
        description="Behave like N agents on the wire: each bus its own MQTT connection, "
        "chained records in batches with signed checkpoints (with --provisioned or --sign), "
        "the collector's acknowledgements awaited and unanswered batches sent again with "
        "capped exponential backoff and jitter. Prints the latency from a record's creation "
        "to the acknowledgement that it was stored and to the collector's evaluation notice "
        "that it was evaluated (percentiles), and what was never answered.",
    )
    parser.add_argument("--vehicles", type=int, default=10, metavar="N",
                        help="simulated buses (default 10)")
    parser.add_argument("--rate", type=float, default=1.0, metavar="HZ",
                        help="records per second per bus (default 1)")
    parser.add_argument("--duration", type=float, default=60.0, metavar="S",
                        help="seconds of records (default 60)")
    parser.add_argument("--broker", default="mqtt://127.0.0.1:1883", metavar="URL",
                        help="mqtt:// or mqtts:// broker (default mqtt://127.0.0.1:1883)")
    parser.add_argument("--batch-interval", type=float, default=1.0, metavar="S",
                        help="seconds between a bus's batches (the agent's default: 1)")
    parser.add_argument("--ack-timeout", type=float, default=30.0, metavar="S",
                        help="send a batch again when S seconds pass without an answer, "
                        "doubling at each resend up to 300 s, with jitter (default 30)")
    parser.add_argument("--drain", type=float, default=60.0, metavar="S",
                        help="after --duration, wait up to S seconds for answers (default 60)")
    parser.add_argument("--prefix", default="SIM", help="vehicle id prefix (default SIM)")
    parser.add_argument("--provisioned", type=Path, metavar="DIR",
                        help="a 'frota provision' folder: its first N vehicles, with their "
                        "broker credentials and signing keys (evaluation notices are not read: "
                        "a bus may not read them)")
    parser.add_argument("--sign", action="store_true",
                        help="without --provisioned, sign a checkpoint per batch with a key made "
                        "for the run, as an agent with an identity does")
    parser.add_argument("--stored-only", action="store_true",
                        help="measure to the acknowledgement only; do not wait for the "
                        "collectors' evaluation notices (frota/v1/evaluated)")
    parser.add_argument("--workers", type=int, default=1, metavar="K",
                        help="split the fleet over K processes (default 1)")
    parser.add_argument("--write-registry", type=Path, metavar="FILE",
                        help="write a fleet registry naming the N simulated buses to FILE "
                        "(for the collector's 'registry') and exit")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run_fleet)


def settings_of(args: argparse.Namespace) -> FleetSettings:
    """The options, checked; SimulatorError names a bad one."""
    if not 1 <= args.vehicles <= 100_000:
        raise SimulatorError("--vehicles must be between 1 and 100000")
    if not 1 <= args.workers <= 64:
        raise SimulatorError("--workers must be between 1 and 64")
    for name in ("rate", "duration", "batch_interval", "ack_timeout", "drain"):
        value = getattr(args, name)
        if not value > 0 or value != value or value == float("inf"):
            raise SimulatorError(f"--{name.replace('_', '-')} must be a positive number")
    try:
        check_broker_url(args.broker)
    except ValueError as err:
        raise SimulatorError(f"--broker: {err}") from err
    if args.provisioned is not None and not (args.provisioned / "vehicles").is_dir():
        raise SimulatorError(f"--provisioned: {args.provisioned} is not a provisioned fleet folder")
    return FleetSettings(args.broker, args.vehicles, args.rate, args.duration,
                         args.batch_interval, args.ack_timeout, args.drain, args.prefix,
                         args.provisioned, sign=args.sign, evaluated=not args.stored_only)


def run_fleet(args: argparse.Namespace) -> int:
    """``frota sim fleet``: run, print the report; 0 when nothing was left unanswered."""
    if args.write_registry is not None:
        args.write_registry.write_text(json.dumps(registry(args.vehicles, args.prefix), indent=1),
                                       encoding="utf-8")
        return 0
    settings = settings_of(args)
    report = run_workers(settings, min(args.workers, args.vehicles))
    out = report.summary()
    if args.json:
        print(json.dumps(out), flush=True)
    else:
        print(f"{report.vehicles} vehicles, {report.duration_s:g} s: {report.created} records "
              f"created, {report.stored} stored, {report.rejected} rejected, "
              f"{report.conflicts} conflicts, {report.unanswered} unanswered; "
              f"{report.batches} batches ({report.resent_batches} resent)")
        for key, what in (("latency_ms", "creation to stored (ack received)"),
                          ("evaluated_ms", "creation to stored and evaluated (notice received)")):
            lat = out[key]
            if lat["p50"] is not None:
                print(f"latency, {what}, ms: "
                      + ", ".join(f"{k} {v:.0f}" for k, v in lat.items()))
        if settings.evaluated and settings.provisioned is None:
            print(f"{report.evaluated} evaluated, {report.unevaluated} stored but never named "
                  f"by an evaluation notice ({report.notices} notices)")
    return 0 if report.unanswered == 0 else 1
