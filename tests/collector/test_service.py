"""The collector process's wiring: the registry's vehicles reloaded live, start-up errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from collector.service import FleetVehicles
from tests.collector.helpers import FLEET, write_config, write_fleet


def _bump(path: Path, doc: object) -> None:
    before = path.stat().st_mtime_ns
    path.write_text(json.dumps(doc))
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_a_vehicle_added_to_the_registry_is_known_without_a_restart(tmp_path: Path) -> None:
    path = write_fleet(tmp_path)
    fleet = FleetVehicles(path, recheck_s=0)
    assert fleet() == frozenset({"ABC1D23", "XYZ9K88"})
    added = {**FLEET, "vehicles": [*FLEET["vehicles"], {"id": "NEW0A00", "seats": 40}]}
    _bump(path, added)
    assert "NEW0A00" in fleet()
    _bump(path, {"vehicles": "broken"})  # an invalid file keeps the last good registry
    assert "NEW0A00" in fleet()


def test_a_bad_registry_stops_the_start_with_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, "mqtt://127.0.0.1:1", 0)
    (tmp_path / "fleet.json").write_text("{not json")
    result = subprocess.run(
        [sys.executable, "-m", "frota", "collector", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("frota collector: error: fleet registry: ")
    assert "not JSON" in result.stderr
    assert result.stderr.count("\n") == 1
