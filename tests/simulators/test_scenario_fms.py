"""The same scenario played with the tachograph on its serial line (registrador + RS-485 door
counters) and on the FMS CAN bus (SLCAN text, doors from DC2, trips entered by the operator),
decoded by the project's decoders, gives the same speed, driver-time and door-state findings
from ``frota check``.

Second by second without ptys (test_scenario_devices.py does the same for the registrador).
Both runs get the same disturbances on top of the scenario so that each family of findings is
really exercised: two minutes at 35 km/h over the line's limit while cruising, and door 2 open
for 20 s while moving. Sampling: the scenario's FMS bus sends TCO1 once per second, at the
second, as the registrador sends its status (a real bus sends 20 Hz; the decoder's 1 Hz speed
records are the first TCO1 of each second plus every start and stop — firmware-notes/fms.md
§7); doors are seen at the second on both (the counters are polled each second, DC2 comes each
second). Speed codes differ in resolution (TCO1 1/256 km/h, the registrador 0.01 km/h).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from protocols.apc.poller import Poller
from protocols.fms import FmsDecoder
from protocols.records import Record, dumps, ts_to_ms
from protocols.registrador.decoder import RegistradorDecoder
from simulators.scenario.command import load_scenario
from simulators.scenario.devices import ScenarioDevices
from simulators.scenario.render import iter_records
from tests.services import PROJECT

#: Scenario seconds of the disturbances (ba-night cruises from about 10 min on).
SPEEDING = (3_000, 3_120)
DOOR_OPEN = (4_000, 4_020)
#: Rule families compared.
COMPARED = ("speed.", "driver.", "doors.")


def _play(tachograph: str) -> tuple[list[Record], Any]:
    sc, tl = load_scenario("ba-night")
    devices = ScenarioDevices(tl, tachograph)  # type: ignore[arg-type]
    vehicle = sc.vehicle
    out: list[Record] = [r for r in iter_records(tl) if r["kind"] == "position"]  # same GPS
    if devices.adapter is not None:
        devices.adapter.receive(b"L\r", tl.ms(0))  # the agent opens the adapter listen-only
        fms = FmsDecoder(vehicle)
    else:
        registrador = RegistradorDecoder(vehicle)
        poller = Poller(vehicle, sorted(devices.sensors))
    for t in range(tl.duration_s + 1):
        devices.advance(t)
        now = tl.ms(t)
        if SPEEDING[0] <= t < SPEEDING[1]:
            assert tl.speed_ms[t] > 15  # cruising
            devices.tachograph.set_speed(tl.speed_ms[t] * 3.6 + 35, now - 1)
        if t in DOOR_OPEN:
            assert tl.speed_ms[t] > 15
            is_open = t == DOOR_OPEN[0]
            devices.sensors[2].open = is_open
            if devices.fms is not None:
                devices.fms.set_door(2, is_open, now - 1)
        if devices.adapter is not None:
            out += fms.feed(b"".join(e.data for e in devices.adapter.due(now)))
            continue
        out += registrador.feed(b"".join(e.data for e in devices.registrador.due(now)))
        for _ in devices.sensors:  # each door polled every second, as the agent does
            request = poller.next_request()
            answer = b"".join(e.data for e in devices.apc.receive(request, now))
            out += poller.feed(request + answer, now)
    if devices.adapter is not None:
        out += fms.finish()
        out += devices.operator_records(vehicle)  # trips: frota collector enter trip
    else:
        out += registrador.finish() + poller.decoder.finish()
    return out, sc


def _findings(records: list[Record], registry: Path, folder: Path, name: str) -> list[dict[str, Any]]:
    path = folder / f"{name}.jsonl"
    path.write_text("".join(dumps(r) + "\n" for r in records))
    done = subprocess.run(
        [sys.executable, "-m", "frota", "check", "--registry", str(registry), str(path)],
        cwd=PROJECT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _key(finding: dict[str, Any]) -> tuple[str, str, str | None, str | None]:
    return finding["rule"], finding["severity"], finding["driver"], finding["trip"]


@pytest.mark.slow
def test_fms_and_registrador_give_the_same_findings(tmp_path: Path) -> None:
    via_registrador, sc = _play("registrador")
    via_fms, _ = _play("fms")
    # The FMS bus gives no trips or incidents: the operator entered them, same times.
    trips = [r for r in via_registrador if r["kind"] in ("trip", "incident")]
    entered = [r for r in via_fms if r["kind"] in ("trip", "incident")]
    assert [(r["ts"], r["kind"], r.get("event")) for r in entered] == [
        (r["ts"], r["kind"], r.get("event")) for r in trips]
    # Doors: the same open/closed moments (FMS has no passenger counts).
    def doors(records: list[Record]) -> list[tuple[str, int, bool]]:
        states: dict[int, bool] = {}
        changes = []
        for r in sorted((r for r in records if r["kind"] == "door"), key=lambda r: r["ts"]):
            if states.get(r["door"], False) != r["open"]:  # doors start closed
                states[r["door"]] = r["open"]
                changes.append((r["ts"], r["door"], r["open"]))
        return changes
    assert doors(via_fms) == doors(via_registrador)

    reg = [f for f in _findings(via_registrador, sc.registry_path, tmp_path, "registrador")
           if f["rule"].startswith(COMPARED)]
    fms = [f for f in _findings(via_fms, sc.registry_path, tmp_path, "fms")
           if f["rule"].startswith(COMPARED)]
    rules = {f["rule"] for f in reg}
    assert {"speed.over_limit", "driver.two_drivers", "doors.open_while_moving"} <= rules, rules
    assert sorted(map(_key, fms)) == sorted(map(_key, reg))
    for a, b in zip(sorted(reg, key=_key), sorted(fms, key=_key), strict=True):
        for edge in ("start", "end"):
            if a[edge] is None or b[edge] is None:
                assert a[edge] == b[edge], (a, b)
            else:  # within one sample (1 s)
                assert abs(ts_to_ms(a[edge]) - ts_to_ms(b[edge])) <= 1_000, (a, b)
