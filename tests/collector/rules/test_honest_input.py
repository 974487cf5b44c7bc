"""Honest input handling (issue 13): ``frota check`` says once per vehicle that a vehicle is not
in the registry; ``frota collector enter report --finding`` refuses what it cannot answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from collector import findings as live
from collector.store import open_store
from tests.collector.rules.timeline import REGISTRY_DOC, Timeline
from tests.services import PROJECT


def _frota(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frota", *args], cwd=PROJECT, input=stdin,
                          capture_output=True, text=True, timeout=120, check=False)


def test_check_warns_once_per_unregistered_vehicle(tmp_path: Path) -> None:
    registry = tmp_path / "fleet.json"
    registry.write_text(json.dumps(REGISTRY_DOC))
    tl = Timeline()
    for t in range(5):                  # V1 is registered; GHOST (3 records) and ZZ are not
        tl.speed("V1", t * 1000, 50).speed("GHOST", t * 1000, 50)
    tl.speed("ZZ", 9000, 10)
    data = "".join(json.dumps(r) + "\n" for r in tl.records)
    done = _frota("check", "--registry", str(registry), stdin=data)
    assert done.returncode == 0, done.stderr
    seats = "occupancy.standing, occupancy.overload, occupancy.index"
    assert done.stderr.splitlines() == [
        f"frota check: warning: vehicle 'GHOST' (line 2) is not in the registry: its seat-based "
        f"rules cannot run ({seats})",
        f"frota check: warning: vehicle 'ZZ' (line 11) is not in the registry: its seat-based "
        f"rules cannot run ({seats})",
    ]
    # out of order (the file is read a second time, sorted): still once each
    shuffled = "".join(json.dumps(r) + "\n" for r in reversed(tl.records))
    again = _frota("check", "--registry", str(registry), stdin=shuffled)
    assert again.returncode == 0, again.stderr
    assert [line.split(" (line")[0] for line in again.stderr.splitlines()] == [
        "frota check: warning: vehicle 'ZZ'", "frota check: warning: vehicle 'GHOST'"]


def _finding(fid: str, rule: str, severity: str, vehicle: str) -> dict[str, object]:
    return {"id": fid, "rule": rule, "profile": "SP", "severity": severity, "vehicle": vehicle,
            "driver": None, "trip": "T1", "line": "SP-1", "start": "2026-03-03T13:00:00.000Z",
            "end": None, "basis": [], "details": {}}


def test_enter_report_refuses_what_it_cannot_answer(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = open_store(str(db))
    never = _frota("collector", "enter", "report", "--db", str(db), "--vehicle", "V1",
                   "--ts", "2026-03-03T15:00:00Z", "--finding", "abc", "--to", "passengers")
    assert never.returncode == 1
    assert never.stderr.endswith("--finding 'abc': no such finding (the collector has not "
                                 "evaluated findings yet)\n")
    live.save(store, [_finding("d1", "trip.assistance_due", "deadline", "V1"),
                      _finding("i1", "trip.interruption", "infraction", "V1")],
              1_772_550_000_000)
    store.close()

    def enter(finding: str, vehicle: str = "V1") -> subprocess.CompletedProcess[str]:
        return _frota("collector", "enter", "report", "--db", str(db), "--vehicle", vehicle,
                      "--ts", "2026-03-03T15:00:00Z", "--finding", finding, "--to", "passengers")

    unknown = enter("nope")
    assert unknown.returncode == 1
    assert "--finding 'nope': no such finding (none as of 2026-03-03T" in unknown.stderr
    other = enter("d1", vehicle="V2")
    assert other.returncode == 1
    assert "--finding 'd1' is a finding of vehicle 'V1', not 'V2'" in other.stderr
    not_deadline = enter("i1")
    assert not_deadline.returncode == 1
    assert ("--finding 'i1' is trip.interruption (infraction), not a deadline: a report answers "
            "trip.assistance_due, trip.report_due, trip.accident_data") in not_deadline.stderr
    for bad in (unknown, other, not_deadline):
        assert bad.stderr.count("\n") == 1
    ok = enter("d1")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["finding"] == "d1"
    # nothing refused was stored
    store = open_store(str(db))
    try:
        assert store.vehicle_ids() == ["V1"]
    finally:
        store.close()
