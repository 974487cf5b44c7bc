"""``frota check`` on the shipped scenarios: the São Paulo breakdown is an interruption infraction
(130 min > 120, SP 39/78) with assistance due (carrier at fault, SP 39 §1); the clean trip gives
no finding at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from simulators.scenario import find
from simulators.scenario.load import load
from simulators.scenario.render import render
from tests.services import PROJECT


def _check(name: str, tmp_path: Path) -> list[dict[str, Any]]:
    path = find(name)
    records = tmp_path / f"{name}.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in render(path)), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "frota", "check", "--registry",
                           str(load(path).registry_path), str(records)],
                          cwd=PROJECT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_clean_trip_has_no_finding_at_all(tmp_path: Path) -> None:
    assert _check("sp-clean", tmp_path) == []


def test_the_breakdown_is_an_interruption_infraction(tmp_path: Path) -> None:
    found = _check("sp-breakdown", tmp_path)
    assert [(f["rule"], f["severity"]) for f in found] == [
        ("trip.assistance_due", "deadline"), ("trip.interruption", "infraction")]
    stop = found[1]
    # the scenario stands 130 min (dwell_min) at the shoulder, away from every point of SP-2002
    assert 129 <= stop["details"]["duration_min"] <= 131
    assert (stop["vehicle"], stop["trip"], stop["details"]["cause"]) == (
        "FRT2B02", "T2002-0303-1030", "breakdown")
    assert found[0]["start"] == stop["start"]               # due at once (SP: any duration)
    assert found[0]["end"] is None                          # no report entered
