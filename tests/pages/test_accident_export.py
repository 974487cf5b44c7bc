"""The accident-data export of ``trip.accident_data`` (TO 58 § único; SP 43 II; BA 34 § único):
an incident ``accident_victims`` entered for FRT1A01 during sp-clean's trip opens the finding,
which names the vehicle and the 24 hours before the accident; the export is the signed bundle of
that vehicle and period, with the finding in its manifest, from the API (found, not found,
forbidden, bad input), the *Ocorrências* page (in Chromium) and ``frota collector export``;
``frota verify`` accepts all of them against the fleet CA."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from cryptography import x509

from collector import findings
from collector import registry as fleet
from collector.entries import enter
from collector.store import open_store
from frota.cli import main
from protocols import identity
from protocols.records import ts_to_ms
from tests.pages.conftest import Server, _serve, fleet_signer
from tests.pages.fleet import AS_OF, AZUL, VERDE
from tests.pages.test_pages_browser import browser, console, page_ok  # noqa: F401 (a fixture)

ACCIDENT = "2026-03-02T13:00:00.000Z"       # during sp-clean's trip (11:30Z to about 14:00Z)
DAY_BEFORE = "2026-03-01T13:00:00.000Z"     # the finding asks for the 24 h before it


def _accident_store(folder: Path, scenario_store: tuple[Path, Path]) -> Path:
    """The scenario store with the accident entered and the findings evaluated again."""
    db = folder / "collector.db"
    shutil.copy(scenario_store[0], db)
    store = open_store(str(db))
    try:
        reg = fleet.load(scenario_store[1])
        enter(store, reg, {"vehicle": "FRT1A01", "ts": ACCIDENT, "kind": "incident",
                           "cause": "accident_victims", "carrier_fault": False}, AS_OF, "test",
              None)
        findings.save(store, findings.evaluate_store(store, reg, AS_OF), AS_OF)
    finally:
        store.close()
    return db


@pytest.fixture(scope="module")
def accident(tmp_path_factory: pytest.TempPathFactory,
             scenario_store: tuple[Path, Path]) -> tuple[Path, Path]:
    """(database with the accident, registry)."""
    return _accident_store(tmp_path_factory.mktemp("accident"), scenario_store), scenario_store[1]


@pytest.fixture(scope="module")
def fleet_ca() -> tuple[object, x509.Certificate]:
    return fleet_signer()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, accident: tuple[Path, Path],
           fleet_ca: tuple[object, x509.Certificate]) -> Iterator[Server]:
    yield from _serve(tmp_path_factory.mktemp("served"), accident, fleet_ca[0])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory,
            fleet_ca: tuple[object, x509.Certificate]) -> Path:
    path = tmp_path_factory.mktemp("ca") / "ca.crt"
    path.write_bytes(identity.cert_pem(fleet_ca[1]))
    return path


def _finding(server: Server, rule: str) -> dict[str, object]:
    found = server.get(f"/findings?rule={rule}", server.token("admin")).json()["findings"]
    assert len(found) == 1, found
    one: dict[str, object] = found[0]
    return one


def _records_before_accident(registry: Path) -> int:
    """By hand from the rendered scenario: sp-clean's records with DAY_BEFORE <= ts < ACCIDENT
    (the incident itself is at the accident's instant, the end of the period: not in it)."""
    lo, hi = ts_to_ms(DAY_BEFORE), ts_to_ms(ACCIDENT)
    lines = (registry.parent / "clean.jsonl").read_bytes().splitlines()
    return sum(1 for line in lines if line.strip()
               and lo <= ts_to_ms(orjson.loads(line)["ts"]) < hi)


def _verify(data: bytes, folder: Path, ca_file: Path, capsys: pytest.CaptureFixture[str],
            *lang: str) -> tuple[int, str]:
    path = folder / "bundle.zip"
    path.write_bytes(data)
    code = main(["verify", str(path), "--ca", str(ca_file), *lang])
    return code, capsys.readouterr().out


def test_the_finding_names_the_vehicle_and_the_day_before(server: Server) -> None:
    f = _finding(server, "trip.accident_data")
    assert (f["vehicle"], f["severity"], f["start"]) == ("FRT1A01", "deadline", ACCIDENT)
    assert f["details"]["export"] == {  # type: ignore[index]
        "vehicle": "FRT1A01", "from": DAY_BEFORE, "to": ACCIDENT}
    assert f["basis"] == ["Decreto SP 29.913/1989 art. 43 II"]      # FRT1A01's profile: SP


def test_api_export_is_the_signed_bundle_of_the_period(
        server: Server, accident: tuple[Path, Path], ca_file: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    f = _finding(server, "trip.accident_data")
    for role, operator in (("fiscal", None), ("operador", AZUL), ("admin", None)):
        response = server.get(f"/findings/{f['id']}/bundle", server.token(role, operator))
        assert response.status_code == 200, (role, response.text[:300])
        assert response.headers["content-type"] == "application/zip"
        assert "frota-acidente-FRT1A01-2026-03-02.zip" in response.headers["content-disposition"]
    zf = zipfile.ZipFile(io.BytesIO(response.content))
    manifest = json.loads(zf.read("manifest.json"))
    assert (manifest["vehicle"], manifest["from"], manifest["to"]) == (
        "FRT1A01", DAY_BEFORE, ACCIDENT)
    assert manifest["finding"] == {"id": f["id"], "rule": "trip.accident_data",
                                   "start": ACCIDENT, "basis": ["Decreto SP 29.913/1989 art. 43 II"]}
    expected = _records_before_accident(accident[1])
    assert expected > 1000                   # 90 minutes of a trip at 1 Hz, at least
    assert manifest["records"] == expected
    assert len(zf.read("records.jsonl").splitlines()) == expected
    assert {"disco-2026-03-01.svg", "disco-2026-03-02.svg"} <= set(zf.namelist())
    code, out = _verify(response.content, tmp_path, ca_file, capsys)
    assert code == 0, out
    assert f"the accident-data export of finding {f['id']} (trip.accident_data; " \
           "Decreto SP 29.913/1989 art. 43 II)" in out
    assert "INTACT" in out
    code, out = _verify(response.content, tmp_path, ca_file, capsys, "--lang", "pt-BR")
    assert code == 0
    assert "dados do registrador após acidente com vítimas" in out


def test_api_export_not_found_forbidden_and_bad_input(server: Server) -> None:
    f = _finding(server, "trip.accident_data")
    path = f"/findings/{f['id']}/bundle"
    assert server.get(path).status_code == 401                                  # no token
    assert server.get(path, "not-a-token").status_code == 401
    # forbidden: another operator's vehicle is not found for it (as /records)
    assert server.get(path, server.token("operador", VERDE)).status_code == 404
    assert server.get("/findings/0123456789abcdef0123/bundle",
                      server.token("fiscal")).status_code == 404
    # bad input: a finding of another rule, an id too long
    other = _finding(server, "trip.assistance_due")
    response = server.get(f"/findings/{other['id']}/bundle", server.token("fiscal"))
    assert response.status_code == 400
    assert "not trip.accident_data" in response.json()["detail"]
    assert server.get("/findings/" + "a" * 200 + "/bundle",
                      server.token("fiscal")).status_code == 400


def test_the_ocorrencias_page_offers_it(browser: Any, server: Server,  # noqa: F811
                                        tmp_path: Path, ca_file: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from selenium.webdriver.common.by import By  # the browser fixture checked selenium
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.base + "/")
    browser.find_element(By.ID, "token").send_keys(server.token("operador", AZUL))
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, 60).until(lambda b: "/entrar" not in b.current_url)
    console(browser)
    text = page_ok(browser, server, "/ocorrencias?regra=trip.accident_data", "ocorrencias-acidente")
    assert "dados do registrador após acidente com vítimas" in text
    links = browser.find_elements(By.CSS_SELECTOR, "a.pacote-acidente")
    assert len(links) == 1
    f = _finding(server, "trip.accident_data")
    href = links[0].get_attribute("href")
    assert href == f"{server.base}/ocorrencias/{f['id']}/pacote"
    # the link with the browser's session (its cookie): the same signed bundle
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
    response = httpx.get(str(href), cookies=cookies, timeout=60)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/zip"
    code, out = _verify(response.content, tmp_path, ca_file, capsys)
    assert code == 0, out
    assert f"finding {f['id']}" in out
    # without a session: to the login
    assert httpx.get(str(href), timeout=60).status_code == 303


def test_cli_export_of_a_finding_and_of_a_period(
        tmp_path: Path, scenario_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        server: Server) -> None:
    folder = tmp_path / "fleet"
    assert main(["provision", "init", str(folder), "--broker-user", "nobody-here"]) == 0
    shutil.copy(scenario_store[1], folder / "registry.json")
    _accident_store(folder, scenario_store)
    capsys.readouterr()
    config = str(folder / "collector.toml")
    f = _finding(server, "trip.accident_data")       # the same id: the same rule, vehicle, start
    out_dir = tmp_path / "pendrive"
    out_dir.mkdir()
    code = main(["collector", "export", "--config", config, "--finding", str(f["id"]),
                 "--out", str(out_dir), "--by", "fiscal Ana"])
    out = capsys.readouterr()
    assert code == 0, out.err
    written = out_dir / "frota-acidente-FRT1A01-2026-03-02.zip"
    assert f"wrote {written}" in out.out
    assert "taken by fiscal Ana" in out.out
    assert [p.name for p in out_dir.iterdir()] == [written.name]        # no .partial left
    assert main(["verify", str(written), "--ca", str(folder / "ca.crt")]) == 0
    assert f"finding {f['id']}" in capsys.readouterr().out
    # the same export again into the folder keeps the first; a folder that is not there (a
    # stick not mounted) is an error, not a file named after it
    assert main(["collector", "export", "--config", config, "--finding", str(f["id"]),
                 "--out", str(out_dir) + "/"]) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "frota-acidente-FRT1A01-2026-03-02-2.zip", written.name]
    assert main(["collector", "export", "--config", config, "--finding", str(f["id"]),
                 "--out", str(tmp_path / "usb0") + "/"]) == 1
    assert "no folder" in capsys.readouterr().err
    assert not (tmp_path / "usb0").exists()
    # a vehicle's period, same command
    target = tmp_path / "dia.zip"
    assert main(["collector", "export", "--config", config, "--vehicle", "FRT1A01",
                 "--since", "2026-03-02", "--until", "2026-03-03", "--out", str(target)]) == 0
    capsys.readouterr()
    assert main(["verify", str(target), "--ca", str(folder / "ca.crt")]) == 0
    assert "accident-data" not in capsys.readouterr().out
    # bad input: one line each, exit 2, nothing written
    other = _finding(server, "trip.assistance_due")
    for bad, says in ((["--finding", str(other["id"])], "not trip.accident_data"),
                      (["--finding", "0123456789abcdef0123"], "unknown finding"),
                      (["--vehicle", "NOPE123", "--since", "2026-03-02", "--until", "2026-03-03"],
                       "unknown vehicle 'NOPE123'"),
                      (["--vehicle", "FRT1A01", "--since", "2026-03-02"], "--since and --until"),
                      (["--finding", str(f["id"]), "--since", "2026-03-02"], "a finding names")):
        code = main(["collector", "export", "--config", config, *bad, "--out",
                     str(tmp_path / "bad.zip")])
        err = capsys.readouterr().err
        assert code == 1, bad
        assert len(err.strip().splitlines()) == 1, err
        assert says in err, (bad, err)
    assert not (tmp_path / "bad.zip").exists()
