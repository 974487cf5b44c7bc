"""``frota collector enter trip start|end``: an operator's trip on a bus whose console is not on
the registrador (an FMS-only bus), stored like any record and judged by the same rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from collector.store import open_store
from tests.services import PROJECT


def _frota(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frota", *args], cwd=PROJECT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_trip_start_and_end_are_stored_as_operator_records(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    open_store(str(db)).close()
    start = _frota("collector", "enter", "trip", "start", "--db", str(db), "--vehicle", "ABC1D23",
                   "--ts", "2026-03-02T13:58:00-03:00", "--trip", "T-0001", "--line", "SP-0401",
                   "--scheduled", "2026-03-02T17:00:00Z")
    assert start.returncode == 0, start.stderr
    stored = json.loads(start.stdout)
    assert (stored["kind"], stored["event"], stored["trip"], stored["line"]) == (
        "trip", "start", "T-0001", "SP-0401")
    assert stored["ts"] == "2026-03-02T16:58:00.000Z"  # 13:58 at UTC-3, in UTC
    assert stored["scheduled"] == "2026-03-02T17:00:00.000Z"
    assert (stored["agent"], stored["seq"]) == ("operator", 1)
    end = _frota("collector", "enter", "trip", "end", "--db", str(db), "--vehicle", "ABC1D23",
                 "--ts", "2026-03-02T22:10:00Z", "--trip", "T-0001", "--line", "SP-0401")
    assert end.returncode == 0, end.stderr
    assert (json.loads(end.stdout)["event"], json.loads(end.stdout)["seq"]) == ("end", 2)
    printed = _frota("collector", "records", "--db", str(db), "--vehicle", "ABC1D23",
                     "--since", "2026-03-02T00:00:00Z")
    assert [json.loads(line)["event"] for line in printed.stdout.splitlines()] == ["start", "end"]


def test_trip_entry_errors_are_one_line(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    open_store(str(db)).close()
    common = ["--db", str(db), "--vehicle", "V", "--ts", "2026-03-02T14:00:00Z", "--trip", "T"]
    scheduled_on_end = _frota("collector", "enter", "trip", "end", *common, "--line", "L",
                              "--scheduled", "2026-03-02T14:00:00Z")
    no_line = _frota("collector", "enter", "trip", "start", *common)
    bad_event = _frota("collector", "enter", "trip", "begin", *common, "--line", "L")
    for done in (scheduled_on_end, no_line, bad_event):
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1, done.stderr
    assert "--scheduled" in scheduled_on_end.stderr
    assert "--line" in no_line.stderr
