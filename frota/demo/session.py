"""One run of ``frota demo`` (the command line is ``frota/commands/demo.py``): the processes,
the player and what is printed."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from collector.store_summary import VehicleSummary
from frota import harness
from frota.demo import report, services, watch
from frota.demo.player import Player
from frota.errors import UserError


def _shown(path: Path) -> str:
    """A path relative to the current directory when it is inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end the demo like Ctrl-C does (cleanly, children stopped)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Demo:
    """One run of the demo: the processes, the player and what is printed."""

    def __init__(self, sc: Any, tl: Any, scale: float, workdir: Path,
                 tachograph: str = "registrador") -> None:
        from simulators.scenario.play import device_names

        self.sc, self.tl, self.scale, self.workdir = sc, tl, scale, workdir
        self.tachograph = tachograph
        self.ttys = {name: workdir / "ttys" / name for name in device_names(tachograph)}
        self.entered: list[str] = []
        self.buffer = workdir / "buffer.sqlite"
        self.database = workdir / "collector.db"
        self.fleet = workdir / "fleet"  # the demo's provisioned fleet (docs/trust.md)
        self.registry = workdir / "fleet.json"
        # Each child runs in its own process group, so a Ctrl-C on the terminal reaches only the
        # demo, which then stops them in order (agent, collector, broker) and waits for each.
        self.mosquitto = harness.Mosquitto(workdir, own_group=True)
        self.broker_port = self.mosquitto.port
        self.http_port = harness.free_port()
        while self.http_port == self.broker_port:
            self.http_port = harness.free_port()
        self.mosquitto_conf = self.mosquitto.conf
        self.collector_conf = workdir / "collector.toml"
        self.agent_conf = workdir / "agent.toml"
        self.collector = harness.CollectorProcess(self.collector_conf, self.http_port,
                                                  workdir / "collector.log", own_group=True)
        self.agent = harness.AgentProcess(self.agent_conf, workdir / "agent.log", own_group=True)
        self.player = Player(sc, tl.duration_s, scale, workdir / "ttys", tachograph,
                             self.enter if tachograph == "fms" else None)
        self.display = watch.Display()

    def write_configs(self) -> None:
        """The registry, and the fleet provisioned as an operator's (frota/provision/demo.py):
        the broker's configuration (TLS, no anonymous access, password file, ACL), the
        collector's (its signing key, an API token) and the agent's (its signing key)."""
        from frota.provision.demo import provision

        shutil.copyfile(self.sc.registry_path, self.registry)
        trust = provision(self.workdir, self.sc.vehicle, self.broker_port, self.http_port,
                          self.registry, self.database, self.buffer)
        self.mosquitto.conf.write_text(trust.mosquitto_conf.read_text(encoding="utf-8"),
                                       encoding="utf-8")
        self.collector.token = trust.token
        services.write_agent_conf(self.agent_conf, self.sc.vehicle, self.broker_port,
                                  self.ttys, self.sc.doors, broker_tables=trust.agent_tables)

    def enter(self, rec: dict[str, Any]) -> None:
        """The operator enters a trip or incident the FMS bus does not carry, as the scenario
        reaches it (what ``frota collector enter trip|incident`` does), in the player's thread."""
        from frota.commands.collector_findings import store_operator_record

        store_operator_record(str(self.collector_conf), rec, by="demo")
        self.entered.append(f"{rec['kind']} {rec.get('event', rec.get('cause'))} at {rec['ts']}")

    def counts(self) -> watch.Counts:
        """The live counts now."""
        return watch.look(self.buffer, self.database)

    def progress(self) -> str:
        """The live line: how far the trip is, and the counts."""
        pct = 100.0 * self.player.second / max(1, self.tl.duration_s)
        return f"{pct:3.0f}% │ {self.counts().line()}"

    def check_children(self) -> None:
        """A UserError if a child or the player died."""
        for child in (self.mosquitto.child, self.collector.child, self.agent.child):
            child.check()
        if self.player.error is not None:
            raise UserError(f"the scenario player failed: {self.player.error}")

    def run(self) -> int:
        """Start, play, drain, report, stop."""
        sc, tl = self.sc, self.tl
        print(f"frota demo: scenario {sc.name} — {sc.description}")
        print(f"  {tl.duration_s / 3600:.1f} h of trip at {self.scale:,.0f}× "
              f"(about {tl.duration_s / self.scale:,.0f} s); work directory "
              f"{_shown(self.workdir)}", flush=True)
        self.write_configs()
        with _signals_interrupt():
            try:
                self.start()
                ok = self.play_and_drain()
                self.finish(ok)
                return 0 if ok else 1
            except KeyboardInterrupt:
                self.display.done()
                print("frota demo: interrupted; stopping the agent, the collector and the broker",
                      file=sys.stderr, flush=True)
                return 130
            finally:
                self.display.done()
                # A second Ctrl-C must not leave a child behind: stopping is not interruptible.
                previous = {sig: signal.signal(sig, signal.SIG_IGN)
                            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
                try:
                    self.stop_all()
                finally:
                    for sig, handler in previous.items():
                        signal.signal(sig, handler)

    def start(self) -> None:
        """Broker, collector, player (lines open), agent (listening on the lines)."""
        self.mosquitto.start()
        print(f"  broker      mosquitto on 127.0.0.1:{self.broker_port} (pid {self.mosquitto.pid}),"
              f" TLS, no anonymous access; fleet provisioned in {_shown(self.fleet)}")
        self.collector.start(wait_connected=True)
        print(f"  collector   pid {self.collector.pid}, database {_shown(self.database)}, "
              f"http://127.0.0.1:{self.http_port}/health (API token in "
              f"{_shown(self.fleet / 'admin.token')})")
        self.player.start()
        while not self.player.ready.wait(0.1):
            self.check_children()
        self.check_children()
        self.agent.start()
        self.agent.wait_open(*self.ttys.values())
        print(f"  agent       pid {self.agent.pid}, buffer {_shown(self.buffer)}, reading "
              + ", ".join(f"{n} {_shown(p)}" for n, p in self.ttys.items()), flush=True)
        self.player.go.set()
        print(watch.LEGEND, flush=True)

    def play_and_drain(self) -> bool:
        """Show counts while the trip plays; then wait until the agent has nothing left."""
        while not self.player.played.wait(0.1):
            self.check_children()
            self.display.show(self.progress())
        self.check_children()
        # The last second is played; the lines stay open and the door sensors answer. Wait until
        # the agent has polled every sensor after the end (passengers of the last stop may have
        # got off between two polls: at 5000x a poll every 0.1 s is one every 500 s of the trip)
        # and then polled again (so it has handed over what the first answer counted), its buffer
        # stops growing and the collector has answered every record in it.
        polls_needed = 3 * max(1, self.sc.doors)
        stable_since, last = time.monotonic(), -1
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline:
            self.check_children()
            now = self.counts()
            if now.captured != last:
                stable_since, last = time.monotonic(), now.captured
            self.display.show(f"100% │ {now.line()}")
            polled = (self.player.polls_after_end or 0) >= polls_needed
            if (polled and now.backlog == 0 and now.captured > 0
                    and time.monotonic() - stable_since >= 1.0):
                break
            time.sleep(0.1)
        status = self.agent.stop()          # it records its own "stopping" and sends it
        self.player.release.set()
        self.player.join()
        final = self.counts()
        self.display.show(f"100% │ {final.line()}", force=True)
        self.display.done()
        if status != 0:
            print(f"frota demo: the agent exited with status {status}; see "
                  f"{_shown(self.agent.log)}", file=sys.stderr)
        if final.backlog:
            print(f"frota demo: {final.backlog} records are still in the agent's buffer, not "
                  "confirmed by the collector", file=sys.stderr)
        return status == 0 and final.backlog == 0 and final.captured > 0

    def wait_live_findings(self, timeout: float = 10.0) -> tuple[list[dict[str, Any]], int | None]:
        """The collector's live findings once it has evaluated everything stored (an evaluation
        that started after the last record was received; it re-evaluates within a second of a
        new record)."""
        since = watch.last_received_ms(self.database) or 0
        deadline = time.monotonic() + timeout
        found, as_of = report.live_findings(self.database)
        while (as_of is None or as_of <= since) and time.monotonic() < deadline:
            self.collector.child.check()
            time.sleep(0.2)
            found, as_of = report.live_findings(self.database)
        return found, as_of

    def finish(self, ok: bool) -> None:
        """Stop the collector and the broker; print the summary, the findings, where to look."""
        from protocols.records import ms_to_ts
        from simulators.scenario.expect import problems

        live, live_as_of = self.wait_live_findings()
        self.collector.stop()
        self.mosquitto.stop()
        summary = report.summarize(self.database, self.sc.vehicle)
        print()
        print("\n".join(report.summary_lines(
            summary, report.vehicle_zone(self.registry, self.sc.vehicle))))
        if summary.last_ms is not None:
            found = report.trip_findings(self.database, self.registry, summary.last_ms)
            print()
            print("\n".join(report.findings_lines(found, summary.last_ms,
                                                  problems(self.sc.expect, found))))
        if live_as_of is not None:
            print(f"  the collector's live findings, judged at its own clock "
                  f"({ms_to_ts(live_as_of)}, so deadlines and monthly statistics of this "
                  f"trip's dates are due): {len(live)}")
        self.where_to_look(summary)

    def where_to_look(self, summary: VehicleSummary) -> None:
        """Where the database and the configurations are, and the commands to look at them."""
        from protocols.records import ms_to_ts, now_ms

        db, reg = _shown(self.database), _shown(self.registry)
        since = ms_to_ts(summary.first_ms) if summary.first_ms is not None else "2000-01-01T00:00:00Z"
        until = ms_to_ts(summary.last_ms) if summary.last_ms is not None else ms_to_ts(now_ms())
        records = f"frota collector records --db {db} --vehicle {self.sc.vehicle} --since {since}"
        print()
        print(f"Where to look (everything is in {_shown(self.workdir)}; processes stopped):")
        print(f"  database        {db} (SQLite: tables records, rejects, findings)")
        print(f"  configurations  {_shown(self.collector_conf)}, {_shown(self.agent_conf)}, "
              f"{reg} (fleet registry), {_shown(self.mosquitto_conf)}; trust material "
              f"{_shown(self.fleet)}")
        print(f"  agent buffer    {_shown(self.buffer)}; logs {_shown(self.workdir)}/*.log")
        print(f"  the records     {records}")
        print(f"  the rules       {records} | frota check --registry {reg} --as-of {until}")
        print(f"  live findings   frota collector findings --db {db}")
        print(f"  the evidence    frota verify --config {_shown(self.collector_conf)}  "
              "(signatures, chains, gaps)")
        print(f"  the pages       frota collector run --config {_shown(self.collector_conf)}, then "
              f"http://127.0.0.1:{self.http_port}/ (sign in with the token in "
              f"{_shown(self.fleet / 'admin.token')}; docs/pages.md)")
        command = Path(sys.executable).parent / "frota"
        venv = command.parent.parent
        if command.exists() and os.environ.get("VIRTUAL_ENV") != str(venv):
            print(f"  (frota is {_shown(command)}, or 'source {_shown(venv)}/bin/activate')")

    def stop_all(self) -> None:
        """Stop whatever still runs: agent first, then the player, collector and broker."""
        self.agent.stop()
        self.player.join()
        self.collector.stop()
        self.mosquitto.stop()
