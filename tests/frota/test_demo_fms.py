"""``frota demo --tachograph fms``: the same trip as test_demo.py with the tachograph read on the
FMS CAN bus (a simulated SLCAN adapter, python-can listen-only) and the trips entered by the
operator as the scenario reaches them. Expected values come from the scenario file
(simulators/scenario/data/sp-breakdown.toml)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from tests.frota.test_demo import demo, processes_mentioning
from tests.services import mosquitto_binary, require


def test_demo_with_the_tachograph_on_fms(tmp_path: Path) -> None:
    require(mosquitto_binary() is not None, "mosquitto is not installed")
    # 300x: the scenario's FMS bus sends about 4 frames per scenario second, read by python-can
    # one byte at a time; 5000x (test_demo.py) would outrun it on a loaded 2-core machine.
    with demo(tmp_path, "--scenario", "sp-breakdown", "--time-scale", "300",
              "--tachograph", "fms") as proc:
        assert proc.wait(timeout=240) == 0, (tmp_path / "out.txt").read_text()
    out = (tmp_path / "out.txt").read_text()
    work = tmp_path / "var" / "demo"
    assert 'protocol = "fms"' in (work / "agent.toml").read_text()
    assert "reading fms " in out

    db = sqlite3.connect(work / "collector.db")
    kinds = dict(db.execute("SELECT kind, COUNT(*) FROM records GROUP BY kind").fetchall())
    assert kinds["speed"] > 10_000
    # No console on CAN: the trip's start and end and the breakdown were entered by the operator.
    entered = [json.loads(str(b)) for (b,) in db.execute(
        "SELECT record FROM records WHERE agent = 'operator' ORDER BY seq")]
    assert [(r["kind"], r.get("event", r.get("cause"))) for r in entered] == [
        ("trip", "start"), ("incident", "breakdown"), ("trip", "end")]
    assert kinds["trip"] == 2
    assert kinds["incident"] == 1
    buf = sqlite3.connect(work / "buffer.sqlite")
    assert buf.execute("SELECT COUNT(*) FROM record_states WHERE state != 1").fetchone() == (0,)
    sources = dict(buf.execute("SELECT source, COUNT(*) FROM records GROUP BY source").fetchall())
    assert sources["fms"] > 10_000
    assert "registrador" not in sources

    assert re.search(r"infraction +trip\.interruption +FRT2B02", out), out
    assert re.search(r"deadline +trip\.assistance_due +FRT2B02", out), out
    mismatch = re.search(r"NOT what the scenario expects: (.*)", out)
    if mismatch is not None:  # door timing at a time scale, as in test_demo.py
        for problem in mismatch.group(1).split("; "):
            assert re.fullmatch(
                r"unexpected \d+× (doors\.open_while_moving|stops\.unapproved) \(\w+\)", problem
            ), out
    else:
        assert "as the scenario expects" in out
    assert processes_mentioning(str(work)) == []
