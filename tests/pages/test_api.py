"""The pages' API over a real uvicorn socket: every route with a found, a not-found, a forbidden
and a bad-input case. Expected values come from the scenario files (tests/pages/fleet.py):
sp-clean cruises at 86 km/h with at most 1.5 km/h of jitter, its driver D-1001 puts the card in
at the start (08:30 local) and takes it out at the end; 38 + 6 passengers board each SP-1001 trip,
41 the SP-2002 trip; seat-km = seats × line length (46 × 95 per SP-1001 trip, 44 × 99)."""

from __future__ import annotations

import csv
import io

import pytest

from collector import findings
from collector import registry as fleet
from tests.pages.conftest import Server
from tests.pages.fleet import (
    AS_OF,
    AZUL,
    BROKEN_TRIP,
    CLEAN_TRIP,
    DAY,
    LATER_TRIP,
    OPERATORS,
    VERDE,
)

ROUTES = ("/vehicles", f"/vehicles/FRT1A01/days/{DAY}", f"/drivers/D-1001/days/{DAY}",
          f"/vehicles/FRT1A01/trips/{CLEAN_TRIP}", "/findings", "/statistics")


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_needs_a_token(server: Server, route: str) -> None:
    assert server.get(route).status_code == 401
    assert server.get(route, "frota_00000000_" + "A" * 43).status_code == 401
    assert server.get(route, server.token("fiscal")).status_code == 200


def test_vehicles(server: Server) -> None:
    body = server.get("/vehicles", server.token("fiscal")).json()
    assert [v["vehicle"] for v in body["vehicles"]] == sorted(OPERATORS)
    by_id = {v["vehicle"]: v for v in body["vehicles"]}
    assert by_id["FRT2B02"]["open_findings"] == 1            # the assistance still due
    assert by_id["FRT1A01"]["position"] is not None
    # forbidden: an operador sees its own fleet only
    mine = server.get("/vehicles", server.token("operador", VERDE)).json()["vehicles"]
    assert [v["vehicle"] for v in mine] == ["FRT2B02"]
    # no input to get wrong but the query string, which is ignored; a bad Host is refused
    assert server.get("/vehicles", server.token("admin"), headers={"Host": "evil.example"}).status_code == 400


def test_vehicle_day(server: Server) -> None:
    fiscal = server.token("fiscal")
    day = server.get(f"/vehicles/FRT1A01/days/{DAY}", fiscal).json()
    assert day["timezone"] == "America/Sao_Paulo"
    assert day["from"] == "2026-03-02T03:00:00.000Z"           # local midnight, UTC−3
    assert 86 - 1.5 <= day["max_kmh"] <= 86 + 1.5
    assert len(day["minutes"]) == 24 * 60
    changes = day["driver_changes"]
    assert [c["driver"] for c in changes] == ["04512345678", None]   # card in, card out
    assert changes[0]["ts"].startswith("2026-03-02T11:30")          # 08:30 local
    assert [t["trip"] for t in day["trips"]] == [CLEAN_TRIP]
    # not found, forbidden (outside the operador's fleet: 404, as /records), bad input
    assert server.get(f"/vehicles/NOPE123/days/{DAY}", fiscal).status_code == 404
    assert server.get(f"/vehicles/FRT1A01/days/{DAY}", server.token("operador", VERDE)).status_code == 404
    assert server.get(f"/vehicles/FRT1A01/days/{DAY}", server.token("operador", AZUL)).status_code == 200
    assert server.get("/vehicles/FRT1A01/days/2026-02-30", fiscal).status_code == 400
    assert server.get(f"/vehicles/bad%20id/days/{DAY}", fiscal).status_code == 400
    # a path under /vehicles that is no route: not found (it was a 405, from the DELETE refusal)
    for path in ("/vehicles/FRT1A01/nope", "/vehicles/FRT1A01/days/2026-03-02/x",
                 "/vehicles/..%2F..%2Fetc/days/2026-03-02"):
        assert server.get(path, fiscal).status_code == 404, path
    # a valid date whose next day is no date (9999-12-31 + 1) or that predates every record
    for day in ("9999-12-31", "0001-01-01"):
        assert server.get(f"/vehicles/FRT1A01/days/{day}", fiscal).status_code == 400, day


def test_driver_day_across_two_vehicles(server: Server) -> None:
    fiscal = server.token("fiscal")
    day = server.get(f"/drivers/D-1001/days/{DAY}", fiscal).json()
    assert day["vehicles"] == ["FRT1A01", "FRT1A02"]
    assert sum(day["totals_min"].values()) == pytest.approx(24 * 60)
    assert day["totals_min"]["drive"] > 2 * 60        # two trips of 95 km at up to 86 km/h
    by_card = server.get(f"/drivers/04512345678/days/{DAY}", fiscal).json()
    assert by_card["driver"] == "D-1001"
    assert server.get(f"/drivers/D-9999/days/{DAY}", fiscal).status_code == 404
    # forbidden: an operador sees the driver only in its own vehicles
    other = server.get(f"/drivers/D-1001/days/{DAY}", server.token("operador", VERDE)).json()
    assert other["vehicles"] == []
    assert {p["activity"] for p in other["pieces"]} == {"rest"}
    assert server.get("/drivers/D-1001/days/yesterday", fiscal).status_code == 400
    assert server.get("/drivers/D-1001/days/9999-12-31", fiscal).status_code == 400


def test_trip(server: Server) -> None:
    fiscal = server.token("fiscal")
    trip = server.get(f"/vehicles/FRT1A01/trips/{CLEAN_TRIP}", fiscal).json()
    assert trip["line"] == "SP-1001"
    assert trip["scheduled"] == "2026-03-02T12:00:00.000Z"
    assert trip["boarded"] == 38 + 6
    assert trip["alighted"] == 9 + 14 + 21
    assert max(n for _, n in trip["on_board"]) == 44
    assert "Terminal Rodoviário de Jundiaí" in [s["point"] for s in trip["stops"]]
    assert trip["findings"] == []
    broken = server.get(f"/vehicles/FRT2B02/trips/{BROKEN_TRIP}", fiscal).json()
    assert {f["rule"] for f in broken["findings"]} == {"trip.interruption", "trip.assistance_due"}
    assert any(s["point"] is None and s["end"] is not None and
               s["start"] < s["end"] for s in broken["stops"])        # the breakdown, off the line
    assert server.get(f"/vehicles/FRT1A01/trips/{LATER_TRIP}", fiscal).status_code == 404
    assert server.get(f"/vehicles/FRT1A02/trips/{LATER_TRIP}", fiscal).status_code == 200
    assert server.get(f"/vehicles/FRT2B02/trips/{BROKEN_TRIP}",
                      server.token("operador", AZUL)).status_code == 404
    assert server.get(f"/vehicles/{'X' * 70}/trips/{CLEAN_TRIP}", fiscal).status_code == 400


def test_findings_filters(server: Server) -> None:
    fiscal = server.token("fiscal")
    every = server.get("/findings", fiscal).json()
    assert every["as_of"] == "2026-04-02T00:00:00.000Z"
    assert sorted(f["rule"] for f in every["findings"]) == [
        "occupancy.index", "occupancy.index", "trip.assistance_due", "trip.interruption"]
    by = {q: [f["rule"] for f in server.get(f"/findings?{q}", fiscal).json()["findings"]]
          for q in ("vehicle=FRT2B02", "driver=D-2001", "rule=trip.interruption",
                    "severity=deadline", "open=true", "vehicle=FRT1A01",
                    "since=2026-03-04T00:00:00Z&rule=trip.interruption",
                    "until=2026-03-03T00:00:00Z")}
    assert sorted(by["vehicle=FRT2B02"]) == ["trip.assistance_due", "trip.interruption"]
    assert sorted(by["driver=D-2001"]) == ["trip.assistance_due", "trip.interruption"]
    assert by["rule=trip.interruption"] == ["trip.interruption"]
    assert by["severity=deadline"] == ["trip.assistance_due"]
    assert by["open=true"] == ["trip.assistance_due"]
    assert by["vehicle=FRT1A01"] == []
    assert by["since=2026-03-04T00:00:00Z&rule=trip.interruption"] == []
    # the month's index starts on March 1st (local), before the breakdown of March 3rd
    assert by["until=2026-03-03T00:00:00Z"] == ["occupancy.index", "occupancy.index"]
    assert server.get("/findings?vehicle=NOPE123", fiscal).status_code == 404
    assert server.get("/findings?driver=D-9999", fiscal).status_code == 404
    azul = server.token("operador", AZUL)
    assert server.get("/findings?vehicle=FRT2B02", azul).status_code == 404
    assert [f["rule"] for f in server.get("/findings", azul).json()["findings"]] == []
    assert server.get("/findings?severity=grave", fiscal).status_code == 400
    assert server.get("/findings?since=yesterday", fiscal).status_code == 400
    # a date is its local day's first instant (São Paulo, UTC−3), as the CLI's --since: until
    # 03/03 00:00 local (03:00Z) keeps the month's indexes (from 01/03) and not the breakdown
    # of 03/03 at 11:10 local
    dated = server.get("/findings?until=2026-03-03", fiscal).json()["findings"]
    assert [f["rule"] for f in dated] == ["occupancy.index", "occupancy.index"]
    assert server.get("/findings?since=2026-03-04&rule=trip.interruption",
                      fiscal).json()["findings"] == []


def test_statistics(server: Server) -> None:
    fiscal = server.token("fiscal")
    lines = {r["linha"]: r for r in server.get("/statistics", fiscal).json()["lines"]}
    assert (lines["SP-1001"]["viagens"], lines["SP-1001"]["passageiros"]) == (2, 88)
    assert lines["SP-1001"]["lugares_km"] == pytest.approx(2 * 46 * 95)
    assert (lines["SP-2002"]["viagens"], lines["SP-2002"]["passageiros"]) == (1, 41)
    assert lines["SP-2002"]["lugares_km"] == pytest.approx(44 * 99)
    text = server.get("/statistics?format=csv", fiscal).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["linha"], r["mes"], r["viagens"]) for r in rows] == [
        ("SP-1001", "2026-03", "2"), ("SP-2002", "2026-03", "1")]
    # the flag in the header's language, as the JSON says it
    yes_no = {True: "sim", False: "não", None: ""}
    assert [r["insuficiente"] for r in rows] == [
        yes_no[lines[n]["insuficiente"]] for n in ("SP-1001", "SP-2002")]
    # lines have no operator: an operador reads them too (docs/pages.md); nothing to not find
    assert len(server.get("/statistics", server.token("operador", AZUL)).json()["lines"]) == 2
    assert server.get("/statistics?format=xml", fiscal).status_code == 400


def test_openapi_describes_the_routes(server: Server) -> None:
    spec = server.get("/openapi.json", server.token("admin")).json()
    assert {"/vehicles", "/vehicles/{vehicle}/days/{day}", "/drivers/{driver}/days/{day}",
            "/vehicles/{vehicle}/trips/{trip}", "/findings", "/findings/{finding}/report",
            "/statistics", "/vehicles/{vehicle}/bundle", "/findings/{finding}/bundle",
            "/vehicles/{vehicle}/entries",
            "/vehicles/{vehicle}/entries/{seq}/withdrawal"} <= set(spec["paths"])
    assert "/vehicles/{_rest}" not in spec["paths"]      # the catch-alls are not routes to call
    assert not any(p.startswith(("/disco", "/jornada", "/entrar")) for p in spec["paths"])


def test_closing_a_deadline_with_a_report(own_server: Server) -> None:
    server = own_server
    due = server.get("/findings?severity=deadline", server.token("fiscal")).json()["findings"]
    assert [f["rule"] for f in due] == ["trip.assistance_due"]
    finding = due[0]["id"]
    interruption = server.get("/findings?rule=trip.interruption",
                              server.token("fiscal")).json()["findings"][0]["id"]
    verde = server.token("operador", VERDE)
    # forbidden: a fiscal reads but does not enter; another operator does not see it
    assert server.post(f"/findings/{finding}/report", server.token("fiscal"),
                       json={"to": "passengers"}).status_code == 403
    assert server.post(f"/findings/{finding}/report", server.token("operador", AZUL),
                       json={"to": "passengers"}).status_code == 404
    # not found, bad input, not a deadline
    assert server.post("/findings/nope/report", verde, json={"to": "passengers"}).status_code == 404
    assert server.post(f"/findings/{finding}/report", verde, json={"to": ""}).status_code == 400
    assert server.post(f"/findings/{finding}/report", verde, content=b"{").status_code == 400
    assert server.post(f"/findings/{interruption}/report", verde,
                       json={"to": "passengers"}).status_code == 400
    # found: the report is stored as `frota collector enter report` stores it, and closes it
    response = server.post(f"/findings/{finding}/report", verde, json={"to": "passengers"})
    assert response.status_code == 201
    stored = response.json()["record"]
    assert (stored["kind"], stored["agent"], stored["finding"], stored["to"]) == (
        "report", "operator", finding, "passengers")
    again = findings.evaluate_store(server.store, fleet.load(server.registry), AS_OF + 10**12)
    closed = next(f for f in again if f["id"] == finding)
    assert closed["end"] == stored["ts"]


def test_every_read_by_a_fiscal_is_logged(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    from tests.pages.test_pages_http import login

    fiscal, admin = server.token("fiscal"), server.token("admin")
    fiscal_id = fiscal.split("_")[1]
    with caplog.at_level("INFO", logger="collector.http"):
        assert server.get(f"/findings?vehicle=FRT2B02&since={DAY}T00:00:00Z", fiscal).status_code == 200
        assert server.get("/vehicles", admin).status_code == 200
        with login(server, fiscal) as client:
            assert client.get(f"/disco/FRT1A01?dia={DAY}").status_code == 200
    reads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fiscal read")]
    assert reads == [
        f"fiscal read: token {fiscal_id} from 127.0.0.1: GET /findings?vehicle=FRT2B02&since={DAY}T00:00:00Z",
        f"fiscal read: token {fiscal_id} from 127.0.0.1: GET /disco/FRT1A01?dia={DAY}"]
