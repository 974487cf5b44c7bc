"""``frota check`` as a real process: scenarios, any input order, stdin, and one-line errors."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.services import PROJECT

SCENARIOS = PROJECT / "simulators" / "scenario" / "data"


def frota(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m frota ARGS``."""
    return subprocess.run([sys.executable, "-m", "frota", *args], input=stdin,
                          capture_output=True, text=True, check=False, cwd=PROJECT)


def findings(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The findings printed by a successful run."""
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped scenarios rendered to canonical records."""
    out = tmp_path_factory.mktemp("scenarios")
    paths = {}
    for name in ("sp-clean", "ba-night"):
        path = out / f"{name}.jsonl"
        result = frota("sim", "scenario", "render", name, "-o", str(path))
        assert result.returncode == 0, result.stderr
        paths[name] = path
    return paths


@pytest.fixture(scope="module")
def ba_night(rendered: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    """``frota check`` of the Bahia night trip in time order (two tests read it)."""
    return frota("check", "--registry", str(SCENARIOS / "ba-night.registry.json"),
                 str(rendered["ba-night"]))


def test_bahia_night_trip_reports_two_drivers(
        ba_night: subprocess.CompletedProcess[str]) -> None:
    got = findings(ba_night)
    (two,) = [f for f in got if f["rule"] == "driver.two_drivers"]
    assert two["profile"] == "BA"
    assert two["driver"] == "D-3001"  # the card 07700112233 mapped through the registry
    assert two["line"] == "BA-0530"
    assert two["basis"] == ["Decreto BA 4.342/1995 art. 86 §3"]
    assert two["details"]["outside_validity"] is True  # Decreto BA 4.342 revoked in 2001


def test_clean_sao_paulo_trip_has_no_driver_or_speed_finding(rendered: dict[str, Path]) -> None:
    got = findings(frota("check", "--registry", str(SCENARIOS / "sp-clean.registry.json"),
                         str(rendered["sp-clean"])))
    assert [f for f in got if f["rule"].startswith(("driver.", "speed."))] == []


def test_any_order_and_stdin_give_the_same_output(
        rendered: dict[str, Path], ba_night: subprocess.CompletedProcess[str],
        tmp_path: Path) -> None:
    registry = str(SCENARIOS / "ba-night.registry.json")
    ordered = ba_night
    lines = rendered["ba-night"].read_text().splitlines()
    random.Random(7).shuffle(lines)
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text("\n".join(lines) + "\n")
    assert frota("check", "--registry", registry, str(shuffled)).stdout == ordered.stdout
    piped = frota("check", "--registry", registry, stdin=shuffled.read_text())
    assert piped.stdout == ordered.stdout
    assert ordered.stdout


REGISTRY = {
    "lines": [{"id": "L1", "profile": "SP", "service": "rodoviario", "length_km": 100,
               "speed_limit_kmh": 80}],
    "vehicles": [{"id": "V1", "seats": 40}],
    "drivers": [{"id": "D1", "card": "C1"}],
}


def _speeding(tmp_path: Path) -> tuple[Path, Path]:
    reg = tmp_path / "fleet.json"
    reg.write_text(json.dumps(REGISTRY))
    recs = [{"vehicle": "V1", "ts": "2026-03-02T10:00:00.000Z", "kind": "driver", "slot": 1,
             "driver": "C1", "activity": "drive"},
            {"vehicle": "V1", "ts": "2026-03-02T10:00:00.000Z", "kind": "trip",
             "event": "start", "trip": "T1", "line": "L1"}]
    recs += [{"vehicle": "V1", "ts": f"2026-03-02T10:00:{s:02d}.000Z", "kind": "speed",
              "kmh": 100 if s >= 10 else 70} for s in range(1, 60)]
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return reg, data


def test_as_of_and_profile_copy(tmp_path: Path) -> None:
    reg, data = _speeding(tmp_path)
    (f,) = findings(frota("check", "--registry", str(reg), str(data)))
    assert (f["rule"], f["start"], f["end"]) == ("speed.over_limit", "2026-03-02T10:00:10.000Z",
                                                 None)
    assert f["details"]["duration_s"] == 49  # open: up to its last sample at 10:00:59
    early = findings(frota("check", "--registry", str(reg), "--as-of",
                           "2026-03-02T10:00:30Z", str(data)))
    assert early[0]["details"]["duration_s"] == 20  # records after --as-of are not read
    assert early[0]["id"] == f["id"]
    sp = (PROJECT / "collector" / "rules" / "profiles" / "SP.toml").read_text()
    copy = tmp_path / "sp-fleet-policy.toml"
    copy.write_text(sp.replace("min_duration_s = 10.0", "min_duration_s = 60.0"))
    assert findings(frota("check", "--registry", str(reg), "--profile", str(copy),
                          str(data))) == []


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "line 3 is not JSON: "),
    ('{"vehicle": "V1", "ts": "2026-03-02T10:00:05.000Z", "kind": "teleport"}',
     "line 3: kind='teleport' is not one of "),
    ('{"vehicle": "V1", "ts": "yesterday", "kind": "speed", "kmh": 3}',
     "line 3: ts: 'yesterday' is not an RFC 3339 timestamp"),
    ('{"vehicle": "V1", "ts": "2026-03-02T10:00:05.000Z", "kind": "trip", "event": "start", '
     '"trip": "T2", "line": "L9"}', "line 3: unknown line 'L9' (not in the registry)"),
])
def test_a_bad_line_is_one_line_naming_it(tmp_path: Path, line: str, message: str) -> None:
    reg, data = _speeding(tmp_path)
    lines = data.read_text().splitlines()
    lines.insert(2, line)
    data.write_text("\n".join(lines) + "\n")
    result = frota("check", "--registry", str(reg), str(data))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"frota check: error: {message}")
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--profile", "RJ"], "--profile 'RJ' is neither a built-in profile (SP, BA, TO) nor a "
                          "profile file"),
    (["--as-of", "soon"], "--as-of 'soon' is not an RFC 3339 timestamp"),
])
def test_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    reg, data = _speeding(tmp_path)
    result = frota("check", "--registry", str(reg), *args, str(data))
    assert (result.returncode, result.stderr) == (1, f"frota check: error: {message}\n")


def test_bad_registry_is_one_line(tmp_path: Path) -> None:
    reg, data = _speeding(tmp_path)
    reg.write_text(json.dumps({"vehicles": [{"id": "V1"}]}))
    result = frota("check", "--registry", str(reg), str(data))
    assert (result.returncode, result.stderr) == (
        1, f"frota check: error: {reg}: vehicles[0] ('V1'): missing 'seats'\n")
