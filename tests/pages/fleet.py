"""A store built from the shipped scenarios, for the pages' and the API's tests.

- FRT1A01 (Viação Azul): ``sp-clean`` as shipped — Tietê → Campinas on 2026-03-02, driver D-1001
  from 08:30 local; peak speed 86 km/h cruise ± 1.5 km/h of jitter (the scenario file).
- FRT1A02 (Viação Azul): the same trip three and a half hours later (scenario start 15:00Z =
  12:00 local), the same driver D-1001: a driver who changed buses.
- FRT2B02 (Expresso Verde): ``sp-breakdown`` on 2026-03-03, driver D-2001: a 130-minute
  interruption (infraction) and assistance due to the passengers (an open deadline).

Findings are judged as of 2026-04-02, so March's ``occupancy.index`` is reported.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from collector import findings
from collector import registry as fleet
from collector.store import open_store, record_row
from frota.cli import main
from protocols.records import ts_to_ms

DATA = Path(__file__).resolve().parents[2] / "simulators" / "scenario" / "data"
AZUL, VERDE = "Viação Azul", "Expresso Verde"
OPERATORS = {"FRT1A01": AZUL, "FRT1A02": AZUL, "FRT2B02": VERDE}
AS_OF = ts_to_ms("2026-04-02T00:00:00Z")
DAY = "2026-03-02"
CLEAN_TRIP, LATER_TRIP, BROKEN_TRIP = "T1001-0302-0900", "T1001-0302-1230", "T2002-0303-1030"


def write_registry(folder: Path) -> Path:
    """The three scenarios' registries in one, with each vehicle's operator."""
    clean = json.loads((DATA / "sp-clean.registry.json").read_text())
    broken = json.loads((DATA / "sp-breakdown.registry.json").read_text())
    vehicles = [dict(v, operator=OPERATORS[v["id"]]) for v in clean["vehicles"] + broken["vehicles"]]
    vehicles.append(dict(clean["vehicles"][0], id="FRT1A02", operator=AZUL))
    doc = {"lines": clean["lines"] + broken["lines"], "vehicles": vehicles,
           "drivers": clean["drivers"] + broken["drivers"]}
    path = folder / "fleet.json"
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1))
    return path


def _render(scenario: str | Path, out: Path) -> list[dict[str, object]]:
    assert main(["sim", "scenario", "render", str(scenario), "-o", str(out)]) == 0
    return [orjson.loads(line) for line in out.read_bytes().splitlines() if line.strip()]


def build(folder: Path) -> tuple[Path, Path]:
    """Render the scenarios into a SQLite store in ``folder``; return (database, registry)."""
    registry = write_registry(folder)
    later = (DATA / "sp-clean.toml").read_text()
    for old, new in (('vehicle = "FRT1A01"', 'vehicle = "FRT1A02"'),
                     ("start = 2026-03-02T11:30:00Z", "start = 2026-03-02T15:00:00Z"),
                     ("2026-03-02T12:00:00Z", "2026-03-02T15:30:00Z"),
                     (CLEAN_TRIP, LATER_TRIP),
                     ('registry = "sp-clean.registry.json"', 'registry = "fleet.json"')):
        assert old in later, old
        later = later.replace(old, new)
    (folder / "later.toml").write_text(later)
    records = (_render("sp-clean", folder / "clean.jsonl")
               + _render(folder / "later.toml", folder / "later.jsonl")
               + _render("sp-breakdown", folder / "broken.jsonl"))
    db = folder / "collector.db"
    store = open_store(str(db))
    try:
        seqs: dict[str, int] = {}
        last: dict[str, int] = {}
        rows = []
        for rec in records:
            vehicle = str(rec["vehicle"])
            seqs[vehicle] = seqs.get(vehicle, 0) + 1
            last[vehicle] = max(last.get(vehicle, 0), ts_to_ms(str(rec["ts"])))
            rows.append(record_row({**rec, "agent": "sim", "seq": seqs[vehicle]}, AS_OF))
        store.put(rows, (), [(v, last[v], AS_OF, "sim") for v in seqs])
        found = findings.evaluate_store(store, fleet.load(registry), AS_OF)
        findings.save(store, found, AS_OF)
    finally:
        store.close()
    return db, registry
