"""``frota demo`` as a real process: a private broker, the collector, the agent and a scenario on
three ptys. It says what it stored and the findings, the database holds those records, and no
child process outlives it (also when interrupted with Ctrl-C).

Expected values come from the scenario file (simulators/scenario/data/sp-breakdown.toml): 41
board at Barra Funda and 18 + 23 = 41 get off at Sorocaba; its [expect] table and the law
(docs/rules.md: São Paulo allows 120 minutes, the breakdown lasts 130) want ``trip.interruption`` as an
infraction. sp-clean is interrupted before its end.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from frota.cli import main
from frota.harness import frota_argv, wait_port
from tests.services import PROJECT, mosquitto_binary, require, stop_process

pytestmark = [pytest.mark.mosquitto, pytest.mark.pty, pytest.mark.slow]


def processes_mentioning(text: str, but: int = 0) -> list[str]:
    """Command lines of live processes (but ``but``) whose arguments contain ``text`` (the
    demo's children all name a file in the work directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name == str(but):
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline}")
    return found


@contextmanager
def demo(tmp_path: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``frota demo`` running in ``tmp_path`` with its output in ``tmp_path/out.txt``; stopped
    like Ctrl-C stops it if the test ends first."""
    with (tmp_path / "out.txt").open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "frota", "demo", *args], cwd=tmp_path, stdout=out,
            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": str(PROJECT)},
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            stop_process(proc, signal.SIGINT, 60)


def test_demo_plays_a_trip_end_to_end(tmp_path: Path) -> None:
    require(mosquitto_binary() is not None, "mosquitto is not installed")
    with demo(tmp_path, "--scenario", "sp-breakdown", "--time-scale", "5000") as proc:
        assert proc.wait(timeout=150) == 0, (tmp_path / "out.txt").read_text()
    out = (tmp_path / "out.txt").read_text()
    work = tmp_path / "var" / "demo"

    # What it stored, as the database holds it.
    stored = re.search(r"Stored for FRT2B02: ([\d,]+) records", out)
    assert stored, out
    total = int(stored.group(1).replace(",", ""))
    db = sqlite3.connect(work / "collector.db")
    kinds = dict(db.execute("SELECT kind, COUNT(*) FROM records GROUP BY kind").fetchall())
    assert sum(kinds.values()) == total
    assert kinds["trip"] == 2
    assert kinds["incident"] == 1
    assert kinds["speed"] > 10_000
    assert kinds["position"] > 10_000
    assert db.execute("SELECT COUNT(*) FROM rejects").fetchone() == (0,)
    # the last stop's passengers too: the demo drains only after the agent polled the sensors
    # once the trip was over (at 5000x a poll every 0.1 s is one every 500 s of the trip)
    assert "passengers 41 boarded, 41 alighted" in out, re.findall(r"passengers .*", out)
    # Every record the agent captured was confirmed, and the collector has each once.
    buf = sqlite3.connect(work / "buffer.sqlite")
    assert buf.execute("SELECT COUNT(*), MAX(seq) FROM record_states WHERE state = 1").fetchone() == (
        total, total)
    assert buf.execute("SELECT COUNT(*) FROM record_states WHERE state != 1").fetchone() == (0,)

    # The findings: the 130-minute breakdown is an infraction and assistance is due.
    assert re.search(r"infraction +trip\.interruption +FRT2B02", out), out
    assert re.search(r"deadline +trip\.assistance_due +FRT2B02", out), out
    # Door counters have no clock: the agent stamps their records with the latest device time
    # plus the monotonic time since (docs/records.md). At 5000x a stall of a few milliseconds in the
    # agent is many seconds of device time, so a door may be stamped while the bus still moves.
    # Apart from those door-timing rules, the findings are exactly what the scenario expects
    # (the exact match at real rates is tested on the rendered records in test_scenario_render).
    mismatch = re.search(r"NOT what the scenario expects: (.*)", out)
    if mismatch is not None:
        for problem in mismatch.group(1).split("; "):
            assert re.fullmatch(
                r"unexpected \d+× (doors\.open_while_moving|stops\.unapproved) \(\w+\)", problem
            ), out
    else:
        assert "as the scenario expects" in out
    # Where to look.
    assert "var/demo/collector.db" in out
    assert "var/demo/agent.toml" in out
    assert "frota collector records --db var/demo/collector.db --vehicle FRT2B02" in out
    assert (work / "collector.toml").is_file()
    assert (work / "fleet.json").is_file()
    assert processes_mentioning(str(work)) == []
    # It ran provisioned (docs/trust.md): TLS, no anonymous access, signed and chained records
    # that frota verify finds intact.
    conf = (work / "mosquitto.conf").read_text()
    assert "allow_anonymous false" in conf
    assert "use_username_as_clientid true" in conf
    assert "frota verify --config var/demo/collector.toml" in out
    assert main(["verify", "--config", str(work / "collector.toml")]) == 0
    assert db.execute("SELECT COUNT(*) FROM checkpoints WHERE state = 'good'").fetchone()[0] >= 1
    # The pages: the line names the collector's configuration and its address; the collector run
    # on that configuration afterwards (its broker gone) serves the login page there.
    pages = re.search(r"the pages +frota collector run --config var/demo/collector\.toml, then "
                      r"http://127\.0\.0\.1:(\d+)/ \(sign in with the token in "
                      r"var/demo/fleet/admin\.token", out)
    assert pages is not None, out
    port = int(pages.group(1))
    collector = subprocess.Popen(frota_argv("collector", "run", "--config", "collector.toml"),
                                 cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, 30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/entrar", timeout=10) as page:
            assert page.status == 200
            assert 'lang="pt-BR"' in page.read().decode()
    finally:
        stop_process(collector, signal.SIGTERM, 15)


def test_ctrl_c_stops_everything(tmp_path: Path) -> None:
    require(mosquitto_binary() is not None, "mosquitto is not installed")
    work = tmp_path / "w"
    with demo(tmp_path, "--time-scale", "100", "--workdir", str(work)) as proc:
        deadline = time.monotonic() + 60
        while "agent       pid" not in (tmp_path / "out.txt").read_text():  # all three up
            assert proc.poll() is None, (tmp_path / "out.txt").read_text()
            assert time.monotonic() < deadline, (tmp_path / "out.txt").read_text()
            time.sleep(0.1)
        assert len(processes_mentioning(str(work), but=proc.pid)) == 3  # broker, collector, agent
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    assert "interrupted" in (tmp_path / "out.txt").read_text()
    assert processes_mentioning(str(work)) == []


def test_a_directory_it_did_not_make_is_left_alone(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    require(mosquitto_binary() is not None, "mosquitto is not installed")
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["demo", "--workdir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "did not make" in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_missing_mosquitto_is_one_line_saying_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # The lookup's two places (PATH, /usr/sbin) made empty: no broker can be found.
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert main(["demo", "--workdir", str(tmp_path / "w")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "mosquitto not found: install it" in err
    assert not (tmp_path / "w").exists()


def test_a_bad_scenario_is_one_line_naming_it_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require(mosquitto_binary() is not None, "mosquitto is not installed")
    bad = tmp_path / "bad.toml"
    bad.write_text("bogus = 1\n")
    assert main(["demo", "--scenario", str(bad), "--workdir", str(tmp_path / "w")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("frota demo: error: --scenario bad.toml: ")
    assert err.count("bad.toml") == 1
    assert "unknown key 'bogus'" in err
    assert main(["demo", "--scenario", "nope", "--workdir", str(tmp_path / "w")]) == 1
    assert "--scenario nope: no such file" in capsys.readouterr().err
