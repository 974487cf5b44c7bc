"""Local time for people (issue 13): JSON stays UTC; texts for people and dates typed by people
are in the local time of the profile that judges them (collector/localtime.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collector import findings as live
from collector.localtime import (
    LocalTimeError,
    finding_profile,
    finding_text,
    home_profile,
    local_text,
    person_time_ms,
)
from collector.registry import Registry, RegistryError
from collector.rules import evaluate, load_profiles
from collector.store import open_store
from protocols.records import ts_to_ms
from tests.collector.rules.timeline import REGISTRY_DOC, Timeline
from tests.services import PROJECT

PROFILES = load_profiles()
SP, BA = PROFILES["SP"].tz, PROFILES["BA"].tz


def test_local_text_with_historical_daylight_saving() -> None:
    # São Paulo: UTC−3 in 2026 (no DST since 2019); UTC−2 on 01/12/2018 (DST then)
    assert local_text("2026-03-02T11:30:00.000Z", SP) == "2026-03-02 08:30:00 -03"
    assert local_text("2018-12-01T12:00:00.000Z", SP) == "2018-12-01 10:00:00 -02"
    assert local_text(None, SP) == "open"


def test_a_date_typed_by_a_person_is_a_day_in_the_zone() -> None:
    # 2026-03-02 in São Paulo starts at 03:00Z; 2018-11-04 (DST began at midnight: 00:00 did not
    # exist, the day began at 01:00 −02) also at 03:00Z
    assert person_time_ms("2026-03-02", SP) == ts_to_ms("2026-03-02T03:00:00Z")
    assert person_time_ms("2018-11-04", SP) == ts_to_ms("2018-11-04T03:00:00Z")
    assert person_time_ms("2026-03-02T10:00:00Z", BA) == ts_to_ms("2026-03-02T10:00:00Z")
    with pytest.raises(LocalTimeError, match="neither an RFC 3339 timestamp"):
        person_time_ms("2026-03-02 14:00", SP)


def _registry(**vehicle: Any) -> Registry:
    doc = json.loads(json.dumps(REGISTRY_DOC))
    doc["vehicles"][0].update(vehicle)
    return Registry.from_dict(doc)


def test_a_vehicles_home_profile_judges_its_records_outside_trips() -> None:
    # V1's home is TO: speeding outside any trip is judged (and read) under TO, whatever the
    # default; V2 has none: the default (SP)
    reg = _registry(profile="TO")
    tl = Timeline()
    for t in range(30):
        tl.speed("V1", t * 1000, 100).speed("V2", t * 1000, 100)
    found = {f["vehicle"]: f for f in evaluate(reg, PROFILES, tl.records, "SP")
             if f["rule"] == "speed.over_limit"}
    assert (found["V1"]["profile"], found["V2"]["profile"]) == ("TO", "SP")
    assert home_profile("V1", reg, PROFILES).name == "TO"
    assert home_profile("V2", reg, PROFILES).name == "SP"
    with pytest.raises(RegistryError, match=r"vehicles\[0\] \('V1'\)\.profile: profile 'RJ'"):
        _registry(profile="RJ")


def test_a_ba_finding_carries_its_caveat_when_printed() -> None:
    ba = {"id": "x", "rule": "driver.two_drivers", "profile": "BA", "severity": "infraction",
          "vehicle": "V1", "driver": "D1", "trip": "T1", "line": "BA-LONG",
          "start": "2026-03-07T00:30:00.000Z", "end": "2026-03-07T07:41:00.000Z",
          "basis": ["Decreto BA 4.342/1995 art. 86 §3"],
          "details": {"length_km": 530, "outside_validity": True}}
    text = finding_text(ba, finding_profile(ba, None, PROFILES))
    # 00:30Z is 21:30 of the day before in Bahia (UTC−3)
    assert "2026-03-06 21:30:00 -03 → 2026-03-07 04:41:00 -03 (America/Bahia)" in text
    assert text.endswith("— outside the validity of profile BA (Decreto Estadual da Bahia "
                         "nº 4.342, de 27/06/1995: from 27/06/1995 until 27/11/2001)")


def _frota(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frota", *args], cwd=PROJECT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_collector_findings_local_and_since_a_local_day(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = open_store(str(db))

    def one(fid: str, end: str) -> dict[str, Any]:
        return {"id": fid, "rule": "trip.interruption", "profile": "SP", "severity": "report",
                "vehicle": "V1", "driver": None, "trip": "T1", "line": "SP-1",
                "start": "2026-03-03T01:00:00.000Z", "end": end, "basis": ["Decreto SP "
                "29.913/1989 art. 39"], "details": {"duration_min": 60.0}}

    # 2026-03-03 in São Paulo begins at 03:00Z: 'a' ended 02:00Z (23:00 on the 2nd, local),
    # 'b' at 04:00Z (01:00 on the 3rd)
    live.save(store, [one("a", "2026-03-03T02:00:00.000Z"), one("b", "2026-03-03T04:00:00.000Z")],
              ts_to_ms("2026-03-04T00:00:00Z"))
    store.close()
    since = _frota("collector", "findings", "--db", str(db), "--since", "2026-03-03")
    assert since.returncode == 0, since.stderr
    assert [json.loads(line)["id"] for line in since.stdout.splitlines()] == ["b"]
    local = _frota("collector", "findings", "--db", str(db), "--local")
    assert local.returncode == 0, local.stderr
    lines = local.stdout.splitlines()
    assert len(lines) == 2
    assert "2026-03-02 22:00:00 -03 → 2026-03-02 23:00:00 -03 (America/Sao_Paulo)" in lines[0]
    assert lines[0].startswith("report     trip.interruption")
