"""Withdrawing an operator entry (issue 15 item 5; docs/records.md, ``withdrawal``): a later
signed entry names the entry it withdraws, with a reason; the entry stays stored and verifies;
the rules stop counting it — a ``report`` that closed a deadline no longer closes it, an
``incident`` no longer opens deadlines — in the live rules, the whole-store evaluation and
``frota check`` alike. From the CLI, the API (found, not found, forbidden, bad input) and the
*Disco do dia*'s form (CSRF)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector import findings
from collector import registry as fleet
from collector.entries import EntryError, enter, entry_of, withdraw
from collector.live_rules import LiveRules
from collector.rules.profile import load_profiles
from collector.store import Store, open_store
from frota.cli import main
from protocols.records import ms_to_ts
from tests.pages.conftest import Server
from tests.pages.fleet import AS_OF, AZUL, CLEAN_TRIP, VERDE
from tests.pages.test_pages_http import _csrf, login
from tests.services import PROJECT

REPORT_TS = "2026-03-03T16:00:00.000Z"         # after sp-breakdown's incident (2026-03-03)
ACCIDENT_TS = "2026-03-02T13:00:00.000Z"       # during sp-clean's trip on FRT1A01


def _by_id(found: list[Any]) -> dict[str, dict[str, Any]]:
    return {f["id"]: dict(f) for f in found}


def _frota_check(store: Store, registry: Path, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """``frota check --as-of`` (a real process) on every stored record as JSON Lines."""
    file = tmp_path / "records.jsonl"
    with file.open("w", encoding="utf-8") as out:
        for vehicle in store.vehicle_ids():
            for text in store.records(vehicle, None, None):
                out.write(text + "\n")
    done = subprocess.run([sys.executable, "-m", "frota", "check", "--registry", str(registry),
                           "--as-of", ms_to_ts(AS_OF), str(file)], cwd=PROJECT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return _by_id([json.loads(line) for line in done.stdout.splitlines()])


def test_the_rules_stop_counting_a_withdrawn_entry(
        tmp_path: Path, scenario_store: tuple[Path, Path]) -> None:
    db = tmp_path / "collector.db"
    shutil.copy(scenario_store[0], db)
    registry_path = scenario_store[1]
    reg = fleet.load(registry_path)
    store = open_store(str(db))
    live = LiveRules(store, reg, registry_path.read_bytes(), load_profiles())

    def judged() -> dict[str, dict[str, Any]]:
        """The live findings after an evaluation, checked against the whole-store evaluation."""
        live.evaluate(AS_OF, AS_OF)
        mine = _by_id(findings.load(store)[0])
        assert mine == _by_id(findings.evaluate_store(store, reg, AS_OF))
        return mine

    try:
        before = judged()
        due = next(f for f in before.values() if f["rule"] == "trip.assistance_due")
        assert due["end"] is None                       # sp-breakdown: assistance still due
        # a report closes it
        report = enter(store, reg, {"vehicle": "FRT2B02", "ts": REPORT_TS, "kind": "report",
                                    "finding": due["id"], "to": "passengers"}, AS_OF, "maria",
                       None)
        assert judged()[due["id"]]["end"] == REPORT_TS
        # an accident with victims opens the accident-data and report deadlines
        accident = enter(store, reg, {"vehicle": "FRT1A01", "ts": ACCIDENT_TS, "kind": "incident",
                                      "cause": "accident_victims"}, AS_OF, "maria", None)
        opened = {f["rule"] for f in judged().values() if f["start"] == ACCIDENT_TS}
        assert opened == {"trip.accident_data", "trip.report_due"}
        # both withdrawn, each by a later signed entry
        gone = withdraw(store, reg, "FRT2B02", report["seq"], "relato lançado no veículo errado",
                        AS_OF + 1000, "joao", None)
        assert (gone["kind"], gone["agent"], gone["seq"], gone["withdraws"], gone["ts"],
                gone["by"]) == ("withdrawal", "operator", report["seq"] + 1, report["seq"],
                                REPORT_TS, "joao")
        withdraw(store, reg, "FRT1A01", accident["seq"], "não houve vítimas", AS_OF + 2000,
                 "joao", None)
        after = judged()
        assert after[due["id"]]["end"] is None          # open again
        assert after[due["id"]]["details"]["open"] is True
        assert not [f for f in after.values() if f["start"] == ACCIDENT_TS]
        assert after == before                          # as if never entered
        assert after == _frota_check(store, registry_path, tmp_path)
        # the entries stay, as stored
        assert entry_of(store, "FRT2B02", report["seq"]) == report
        assert entry_of(store, "FRT1A01", accident["seq"]) == accident
        # refused: withdrawn already, a withdrawal, an entry that does not exist
        for seq, says in ((report["seq"], "withdrawn already"), (gone["seq"], "is a withdrawal"),
                          (99, "has no operator entry 99")):
            with pytest.raises(EntryError, match=says):
                withdraw(store, reg, "FRT2B02", seq, "x", AS_OF, "joao", None)
        with pytest.raises(EntryError, match="reason"):
            withdraw(store, reg, "FRT1A01", 1, "", AS_OF, "joao", None)
    finally:
        store.close()


@pytest.fixture
def fleet_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A provisioned fleet (its collector.toml has [trust]), a registry with one bus."""
    folder = tmp_path / "fleet"
    assert main(["provision", "init", str(folder), "--broker-user", "nobody-here"]) == 0
    (folder / "registry.json").write_text(json.dumps(
        {"lines": [], "drivers": [], "vehicles": [{"id": "ABC1D23", "seats": 46}]}))
    open_store(str(folder / "collector.db")).close()
    capsys.readouterr()
    return folder


def test_cli_withdrawal_is_signed_and_the_store_verifies(
        fleet_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(fleet_dir / "collector.toml")
    assert main(["collector", "enter", "incident", "--config", config, "--vehicle", "ABC1D23",
                 "--ts", "2026-03-02T12:00:00-03:00", "--cause", "breakdown", "--by", "maria"]) == 0
    incident = json.loads(capsys.readouterr().out)
    code = main(["collector", "enter", "withdrawal", "--config", config, "--vehicle", "ABC1D23",
                 "--seq", str(incident["seq"]), "--reason", "entered twice", "--by", "joao"])
    out = capsys.readouterr()
    assert code == 0, out.err
    stored = json.loads(out.out)
    assert (stored["kind"], stored["seq"], stored["withdraws"], stored["reason"], stored["by"],
            stored["ts"]) == ("withdrawal", 2, 1, "entered twice", "joao", incident["ts"])
    assert "unsigned" not in out.err
    assert main(["verify", "--config", config]) == 0
    verified = capsys.readouterr().out
    assert "2 operator entr(ies)" in verified
    # bad input: one line, exit 1, nothing stored
    for bad, says in ((["--seq", "1"], "withdrawn already"),
                      (["--seq", "2"], "is a withdrawal"),
                      (["--seq", "7"], "no operator entry 7"),
                      (["--seq", "0"], "--seq"),
                      (["--seq", "1", "--reason", " "], "--reason")):
        args = ["collector", "enter", "withdrawal", "--config", config, "--vehicle", "ABC1D23",
                "--reason", "again", *bad]
        code = main(args)
        err = capsys.readouterr().err
        assert code == 1, bad
        assert says in err, (bad, err)
        assert len(err.strip().splitlines()) == 1
    store = open_store(str(fleet_dir / "collector.db"), create=False)
    try:
        assert int(store._read("SELECT count(*) FROM records")[0][0]) == 2
    finally:
        store.close()


def _report(server: Server) -> dict[str, Any]:
    """A report closing FRT2B02's assistance deadline, entered as the operator would."""
    due = server.get("/findings?rule=trip.assistance_due", server.token("fiscal")).json()
    stored: dict[str, Any] = enter(server.store, None, {
        "vehicle": "FRT2B02", "ts": REPORT_TS, "kind": "report",
        "finding": due["findings"][0]["id"], "to": "passengers"}, AS_OF, "maria", None)
    return stored


def test_api_withdrawal(own_server: Server) -> None:
    server = own_server
    report = _report(server)
    verde = server.token("operador", VERDE)
    path = f"/vehicles/FRT2B02/entries/{report['seq']}/withdrawal"
    listed = server.get("/vehicles/FRT2B02/entries", server.token("fiscal")).json()
    assert listed["entries"] == [report]
    # forbidden: no token; a fiscal reads but does not enter; another operator does not see it
    assert server.post(path, json={"reason": "x"}).status_code == 401
    assert server.post(path, server.token("fiscal"), json={"reason": "x"}).status_code == 403
    assert server.post(path, server.token("operador", AZUL),
                       json={"reason": "x"}).status_code == 404
    assert server.get("/vehicles/FRT2B02/entries",
                      server.token("operador", AZUL)).status_code == 404
    # not found: another vehicle, an entry it does not have
    assert server.post("/vehicles/NOPE123/entries/1/withdrawal", verde,
                       json={"reason": "x"}).status_code == 404
    assert server.post("/vehicles/FRT2B02/entries/99/withdrawal", verde,
                       json={"reason": "x"}).status_code == 404
    # bad input
    for body in ({"reason": ""}, {"reason": "x" * 201}, {}, {"reason": 5}):
        assert server.post(path, verde, json=body).status_code == 400, body
    assert server.post("/vehicles/FRT2B02/entries/0/withdrawal", verde,
                       json={"reason": "x"}).status_code == 400
    assert server.post(path, verde, content=b"{").status_code == 400
    # found
    response = server.post(path, verde, json={"reason": "relato em duplicidade"})
    assert response.status_code == 201
    gone = response.json()["record"]
    assert (gone["kind"], gone["withdraws"], gone["reason"], gone["ts"], gone["by"]) == (
        "withdrawal", report["seq"], "relato em duplicidade", REPORT_TS,
        f"token {verde.split('_')[1]} ({VERDE})")
    listed = server.get("/vehicles/FRT2B02/entries", verde).json()["entries"]
    assert listed == [dict(report, withdrawn_by=gone["seq"]), gone]
    # again, and the withdrawal itself: refused
    assert server.post(path, verde, json={"reason": "x"}).status_code == 400
    assert server.post(f"/vehicles/FRT2B02/entries/{gone['seq']}/withdrawal", verde,
                       json={"reason": "x"}).status_code == 400


def test_the_disco_do_dia_form_withdraws_with_csrf(own_server: Server) -> None:
    server = own_server
    report = _report(server)
    page = "/disco/FRT2B02?dia=2026-03-03"
    with login(server, server.token("fiscal")) as fiscal:
        text = fiscal.get(page).text
        assert f"entrada nº {report['seq']}, por maria" in text
        assert 'class="retirar"' not in text                    # a fiscal reads only
        refused = fiscal.post("/disco/FRT2B02/retirar", data={
            "csrf": _csrf(text), "seq": report["seq"], "reason": "x", "dia": "2026-03-03"})
        assert refused.status_code == 403
    with login(server, server.token("operador", VERDE)) as client:
        text = client.get(page).text
        assert 'class="retirar"' in text
        form = {"csrf": _csrf(text), "seq": str(report["seq"]), "reason": "relato duplicado",
                "dia": "2026-03-03"}
        # no or a forged CSRF value: refused, nothing stored
        assert client.post("/disco/FRT2B02/retirar", data={**form, "csrf": "forged"}
                           ).status_code == 403
        with httpx.Client(base_url=server.base, timeout=30) as stranger:
            assert stranger.post("/disco/FRT2B02/retirar", data=form).status_code == 303  # login
        assert "withdrawn_by" not in server.get(
            "/vehicles/FRT2B02/entries", server.token("fiscal")).json()["entries"][0]
        done = client.post("/disco/FRT2B02/retirar", data=form)
        assert done.status_code == 303
        assert done.headers["location"].startswith("/disco/FRT2B02?dia=2026-03-03")
        text = client.get(page).text
        assert "retirada da entrada nº" in text
        assert "relato duplicado" in text
        assert '<b class="retirada">retirada</b>' in text
        assert 'class="retirar"' not in text                    # nothing left to withdraw
        # withdrawn already: a clear refusal
        again = client.post("/disco/FRT2B02/retirar", data={**form, "csrf": _csrf(text)})
        assert again.status_code == 400
    entries = server.get("/vehicles/FRT2B02/entries", server.token("fiscal")).json()["entries"]
    assert entries[0]["withdrawn_by"] == entries[1]["seq"]
    assert entries[1]["by"].startswith("token ")


def test_a_withdrawn_trip_entry_is_no_trip(own_server: Server) -> None:
    """A trip the operator entered and then withdrew is judged as never entered: the *Viagem*
    (page and API) no longer finds it and the *Disco do dia* no longer lists nor links it."""
    server = own_server
    trip = "T-ENTERED-BY-MISTAKE"
    entered = enter(server.store, None, {
        "vehicle": "FRT1A01", "ts": "2026-03-02T19:00:00.000Z", "kind": "trip", "event": "start",
        "trip": trip, "line": "SP-1001", "scheduled": None}, AS_OF, "maria", None)
    fiscal = server.token("fiscal")
    day = "/vehicles/FRT1A01/days/2026-03-02"
    assert server.get(f"/vehicles/FRT1A01/trips/{trip}", fiscal).status_code == 200
    assert trip in [t["trip"] for t in server.get(day, fiscal).json()["trips"]]
    with login(server, fiscal) as client:
        assert client.get(f"/viagem/FRT1A01/{trip}").status_code == 200
        assert f'href="/viagem/FRT1A01/{trip}"' in client.get("/disco/FRT1A01?dia=2026-03-02").text
    withdraw(server.store, None, "FRT1A01", entered["seq"], "viagem lançada por engano",
             AS_OF + 1000, "joao", None)
    assert server.get(f"/vehicles/FRT1A01/trips/{trip}", fiscal).status_code == 404
    assert [t["trip"] for t in server.get(day, fiscal).json()["trips"]] == [CLEAN_TRIP]
    with login(server, fiscal) as client:
        assert client.get(f"/viagem/FRT1A01/{trip}").status_code == 404
        text = client.get("/disco/FRT1A01?dia=2026-03-02").text
        assert f'href="/viagem/FRT1A01/{trip}"' not in text
        assert '<b class="retirada">retirada</b>' in text          # still listed, as withdrawn
        assert client.get(f"/viagem/FRT1A01/{CLEAN_TRIP}").status_code == 200
