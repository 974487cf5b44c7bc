"""The fleet registry: loading JSON and YAML, and one clear error per mistake."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from collector.registry import Registry, RegistryError, load

GOOD: dict[str, Any] = {
    "lines": [
        {"id": "SP-0401", "profile": "SP", "service": "rodoviario", "length_km": 430,
         "speed_limit_kmh": 90,
         "speed_zones": [{"limit_kmh": 60, "lat": -23.31, "lon": -46.95, "radius_m": 800}],
         "points": [{"name": "Terminal Tietê", "kind": "terminal", "lat": -23.5163,
                     "lon": -46.6252, "radius_m": 150}]},
    ],
    "vehicles": [{"id": "ABC1D23", "seats": 46, "capacity": 46}],
    "drivers": [{"id": "D-1001", "name": "Maria Souza", "card": "04512345678"}],
}

YAML = """\
lines:
  - id: SP-0401
    profile: SP
    service: rodoviario
    length_km: 430
    points:
      - {name: Terminal Tietê, kind: terminal, lat: -23.5163, lon: -46.6252}
vehicles:
  - {id: ABC1D23, seats: 46}
drivers:
  - {id: D-1001, name: Maria Souza, card: "04512345678"}
"""


def test_the_contract_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(GOOD))
    reg = load(path)
    line = reg.line("SP-0401")
    assert line.profile == "SP"
    assert line.speed_zones[0].limit_kmh == 60
    assert reg.vehicles["ABC1D23"].max_on_board == 46
    assert reg.driver_id("04512345678") == "D-1001"  # a card maps to the driver id
    assert reg.driver_id("D-1001") == "D-1001"
    assert reg.driver_id("99999") == "99999"  # an unknown card is kept as it is


def test_yaml_is_accepted_and_radius_defaults_to_150(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(YAML)
    reg = load(path)
    assert reg.lines["SP-0401"].points[0].radius_m == 150
    assert reg.vehicles["ABC1D23"].capacity is None


def _broken(edit: Any) -> str:
    doc = copy.deepcopy(GOOD)
    edit(doc)
    with pytest.raises(RegistryError) as info:
        Registry.from_dict(doc)
    return str(info.value)


def test_errors_name_what_is_wrong() -> None:
    msg = _broken(lambda d: d["lines"][0]["points"][0].pop("lat"))
    assert msg == "lines[0] ('SP-0401').points[0] ('Terminal Tietê'): missing 'lat'"
    msg = _broken(lambda d: d["vehicles"][0].pop("seats"))
    assert msg == "vehicles[0] ('ABC1D23'): missing 'seats'"
    msg = _broken(lambda d: d["lines"][0].update(service="interestadual"))
    assert msg.startswith("lines[0] ('SP-0401').service: ")
    assert "rodoviario" in msg
    msg = _broken(lambda d: d["lines"][0]["points"][0].update(kind="garagem"))
    assert msg.startswith("lines[0] ('SP-0401').points[0] ('Terminal Tietê').kind: ")
    msg = _broken(lambda d: d["lines"][0].update(profile="RJ"))
    assert msg == "lines[0] ('SP-0401').profile: profile 'RJ' is not one of SP, BA, TO"
    msg = _broken(lambda d: d["vehicles"].append({"id": "ABC1D23", "seats": 40}))
    assert msg == "vehicles: duplicate id 'ABC1D23'"
    msg = _broken(lambda d: d["drivers"].append({"id": "D-1002", "card": "04512345678"}))
    assert msg == "drivers ('D-1002'): card '04512345678' is also the card of 'D-1001'"
    msg = _broken(lambda d: d["lines"].append(dict(d["lines"][0])))
    assert msg == "lines: duplicate id 'SP-0401'"
    msg = _broken(lambda d: d["vehicles"][0].update(seats=0))
    assert msg.startswith("vehicles[0] ('ABC1D23').seats: ")
    msg = _broken(lambda d: d["vehicles"][0].update(colour="blue"))
    assert msg == "vehicles[0] ('ABC1D23').colour: unknown field"
    msg = _broken(lambda d: d["vehicles"][0].update(capacity=40))
    assert msg == "vehicles ('ABC1D23'): capacity 40 is below seats 46"


def test_unknown_line() -> None:
    reg = Registry.from_dict(GOOD)
    with pytest.raises(RegistryError, match="unknown line 'SP-9999'"):
        reg.line("SP-9999")


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="cannot read"):
        load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(RegistryError, match=r"bad.json: not JSON: .* at line 1"):
        load(bad)
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    with pytest.raises(RegistryError, match="is an object"):
        load(listed)
