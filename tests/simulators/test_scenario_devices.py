"""The three device models driven by a scenario, second by second without ptys, decoded by the project."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocols.apc.poller import Poller
from protocols.nmea import NmeaDecoder
from protocols.records import Record
from protocols.registrador.decoder import RegistradorDecoder
from simulators.scenario import load
from simulators.scenario.devices import ScenarioDevices
from simulators.scenario.render import iter_records
from simulators.scenario.timeline import build

SHORT = Path(__file__).parent.parent / "data" / "scenario" / "short.toml"


def _strip(rec: Record) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in ("raw", "device_seq")}


def test_devices_follow_the_timeline_second_by_second() -> None:
    sc = load(SHORT)
    tl = build(sc)
    devices = ScenarioDevices(tl)
    registrador, gps = RegistradorDecoder(sc.vehicle), NmeaDecoder(sc.vehicle)
    poller = Poller(sc.vehicle, [1, 2])
    got: dict[str, list[Record]] = {"registrador": [], "gps": [], "apc": []}
    for t in range(tl.duration_s + 1):
        devices.advance(t)
        now = tl.ms(t)
        got["registrador"] += registrador.feed(b"".join(e.data for e in devices.registrador.due(now)))
        got["gps"] += gps.feed(b"".join(e.data for e in devices.gps.due(now)))
        # a door is open only while the bus stands, in the models themselves
        if any(sensor.open for sensor in devices.sensors.values()):
            assert tl.speed_ms[t] == 0
            assert devices.registrador.kmh == 0
        for _ in range(2):  # poll both doors every second, as the agent would
            request = poller.next_request()
            answer = b"".join(e.data for e in devices.apc.receive(request, now))
            got["apc"] += poller.feed(request + answer, now)
    got["gps"] += gps.finish()
    rendered = list(iter_records(tl))

    want = [_strip(r) for r in rendered if r["kind"] in ("speed", "driver", "trip", "incident")]
    assert [(r["ts"], r["kind"]) for r in got["registrador"]] == [(r["ts"], r["kind"]) for r in want]
    for g, w in zip(got["registrador"], want, strict=True):
        if w["kind"] == "speed":
            assert abs(g["kmh"] - w["kmh"]) <= 0.01
            assert abs(g["odometer_m"] - w["odometer_m"]) <= w["kmh"] / 3.6 / 2 + 1
        else:
            assert _strip(g) == w
    positions = [r for r in rendered if r["kind"] == "position"]
    assert len(got["gps"]) == len(positions)
    for g, w in zip(got["gps"], positions, strict=True):
        assert g["ts"] == w["ts"]
        assert abs(g["lat"] - w["lat"]) <= 1e-6
        assert abs(g["lon"] - w["lon"]) <= 1e-6

    # polled every second, every opening and closing is seen within a second of the render
    doors = [_strip(r) for r in got["apc"] if r["kind"] == "door"]
    rendered_doors = [r for r in rendered if r["kind"] == "door"]
    assert [(r["door"], r["open"]) for r in doors] == [(r["door"], r["open"])
                                                       for r in rendered_doors]
    assert sum(r["boarded"] for r in doors) == 13  # 10 + 3, by hand from short.toml
    assert sum(r["alighted"] for r in doors) == 13  # 4 + 4 + 5
    speed_at = {r["ts"]: r["kmh"] for r in got["registrador"] if r["kind"] == "speed"}
    assert all(speed_at[r["ts"]] == 0 for r in doors)
    assert [r for r in got["apc"] if r["kind"] == "device"] == []


def test_device_events_are_rendered_and_played(tmp_path: Path) -> None:
    text = SHORT.read_text(encoding="utf-8") + (
        '\n[[device_event]]\nat_min = 2\ndevice = "registrador"\nstatus = "compartment_open"\n'
        'detail = "disc compartment opened"\n')
    path = tmp_path / "short.toml"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "short.registry.json").write_text(
        (SHORT.parent / "short.registry.json").read_text(encoding="utf-8"), encoding="utf-8")
    tl = build(load(path))
    rendered = [r for r in iter_records(tl) if r["kind"] == "device"]
    assert rendered == [{"vehicle": "TST0A00", "ts": "2026-05-04T10:02:00.000Z", "kind": "device",
                         "device": "registrador", "status": "compartment_open",
                         "detail": "disc compartment opened"}]
    devices = ScenarioDevices(tl)
    decoder = RegistradorDecoder("TST0A00")
    decoded: list[Record] = []
    for t in range(200):
        devices.advance(t)
        decoded += decoder.feed(b"".join(e.data for e in devices.registrador.due(tl.ms(t))))
    played = [(r["ts"], r["device"], r["status"]) for r in decoded if r["kind"] == "device"]
    # the registrador words its own detail; the time, device and status are the scenario's
    assert played == [("2026-05-04T10:02:00.000Z", "registrador", "compartment_open")]
