"""The bus's roadside page and the inspector's token (issue 17 item 4): a token issued by a
provisioned collector (frota collector inspector-token) is checked offline against the fleet CA
— for its vehicle, in its validity, by a collector's key only, unaltered; the page, over a real
uvicorn socket, refuses a request without a valid token (401, in Portuguese), shows the last
24 h and the disc, and serves a bundle that frota verify accepts; every read and every bundle is
logged."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519

from agent.buffer import Buffer
from agent.config import load_config
from agent.roadside_page import make_app
from frota.cli import main
from frota.provision import fleet as provisioning
from protocols import identity
from protocols.bundle_check import check_bundle
from protocols.inspector_token import TokenError, check, issue
from tests.pages.test_pages_browser import browser, page_ok  # noqa: F401 (a fixture)
from tests.roadside.backdate import backdate_fleet
from tests.services import free_port, serve_app
from tests.trust.broker import broker_user
from tests.trust.fleet import speed

BUS, OTHER = "ABC1D23", "XYZ9K88"
T0 = 1_772_460_000_000        # 2026-03-02T14:00:00Z: frame n of tests/trust/fleet.py at T0 + n s
HOUR = 3_600_000
SINCE = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)


@dataclass
class Fleet:
    folder: Path
    agent_toml: Path
    ca: Path


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    made = provisioning.init(tmp_path / "fleet", hosts=["127.0.0.1"], port=free_port(),
                             bind="127.0.0.1", broker_user=broker_user(), persistence=False)
    agent_toml = provisioning.add_vehicle(made, BUS, str(tmp_path / "buffer.sqlite"))
    provisioning.add_vehicle(made, OTHER, str(tmp_path / "other.sqlite"))
    # the tokens and records are of 2026-03-02: certificates valid since a month before
    backdate_fleet(made.folder, SINCE)
    return Fleet(made.folder, agent_toml, made.ca_cert_path)


def _collector_key(fleet: Fleet) -> tuple[ed25519.Ed25519PrivateKey, x509.Certificate]:
    folder = fleet.folder / "collectors" / "main"
    key = identity.load_signing_key(next(folder.glob("*.key")))
    cert = identity.load_cert_file(next(p for p in folder.glob("*.crt") if p.name != "ca.crt"))
    return key, cert


def test_the_cli_issues_a_token_the_bus_accepts(fleet: Fleet, capsys: pytest.CaptureFixture[str],
                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="frota.commands.collector_inspector"):
        assert main(["collector", "inspector-token", "--config",
                     str(fleet.folder / "collector.toml"), "--inspector", "Ana Lima (PRF 1234)",
                     "--vehicle", BUS, "--hours", "2"]) == 0
    token = capsys.readouterr().out.strip()
    ca = identity.load_cert_file(fleet.ca)
    now = int(time.time() * 1000)
    grant = check(token, ca, BUS, now)
    assert (grant.inspector, grant.vehicles, grant.collector) == ("Ana Lima (PRF 1234)", (BUS,),
                                                                   "main")
    # the issue is logged with the token's id, the one the bus logs for every read; the
    # provisioned registry lists no vehicle yet, so the id is said to be unknown (a typo's sign)
    said = [r.getMessage() for r in caplog.records]
    assert f"inspector token {grant.id} issued to 'Ana Lima (PRF 1234)' for {BUS}, 2.0 h" in said
    assert any(m.startswith(f"vehicle {BUS} is not in the registry") for m in said)
    with pytest.raises(TokenError, match=f"not valid for vehicle {OTHER}"):
        check(token, ca, OTHER, now)
    with pytest.raises(TokenError, match="expired"):
        check(token, ca, BUS, now + 2 * HOUR + 60_000)
    with pytest.raises(TokenError, match="not valid yet"):
        check(token, ca, BUS, now - 60_000)
    # bad input: one line
    assert main(["collector", "inspector-token", "--config", str(fleet.folder / "collector.toml"),
                 "--inspector", "Ana", "--vehicle", BUS, "--hours", "25"]) == 1
    assert "at most 24 hours" in capsys.readouterr().err


def test_only_a_collector_of_this_fleet_issues_tokens(fleet: Fleet) -> None:
    ca = identity.load_cert_file(fleet.ca)
    # a bus's own key, certified by the fleet CA, cannot issue one
    bus = fleet.folder / "vehicles" / BUS
    token = issue(identity.load_signing_key(bus / "signing.key"),
                  identity.load_cert_file(bus / "signing.crt"), "eu", [BUS], T0, 1)
    with pytest.raises(TokenError, match="not issued by a collector"):
        check(token, ca, BUS, T0 + 1)
    # a collector of another CA
    other_key, other_ca = identity.make_ca("another fleet", not_before=SINCE)
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(other_key, other_ca, "main", "collector", key.public_key(),
                                        not_before=SINCE)
    with pytest.raises(TokenError, match="not issued under this fleet's CA"):
        check(issue(key, cert, "eu", [BUS], T0, 1), ca, BUS, T0 + 1)
    # a genuine one with its claims edited (another vehicle): the signature fails
    ckey, ccert = _collector_key(fleet)
    good = issue(ckey, ccert, "eu", [OTHER], T0, 1)
    body, sig, der = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["vehicles"] = [BUS]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(TokenError, match="signature does not verify"):
        check(f"{forged}.{sig}.{der}", ca, BUS, T0 + 1)
    for junk in ("", "a.b", "a.b.c", "x" * 5000):
        with pytest.raises(TokenError):
            check(junk, ca, BUS, T0 + 1)


@pytest.fixture
def page(fleet: Fleet) -> Iterator[tuple[str, Fleet, list[int]]]:
    """The page over a real socket; its clock (a list to set) starts an hour after T0."""
    config = load_config(fleet.agent_toml)
    buf = Buffer(config.buffer.path)
    # an hour at one frame a minute, 60 to 90 km/h
    buf.add([("registrador", speed(BUS, 60 * m, kmh=60.0 + m % 31)) for m in range(60)])
    clock = [T0 + HOUR]
    app = make_app(config, identity.load_cert_file(fleet.ca), ZoneInfo("America/Sao_Paulo"),
                   clock=lambda: clock[0])
    try:
        with serve_app(app) as base:
            yield base, fleet, clock
    finally:
        buf.close()


def test_the_page_needs_a_token_and_shows_the_day(page: tuple[str, Fleet, list[int]]) -> None:
    base, fleet, _ = page
    ckey, ccert = _collector_key(fleet)
    token = issue(ckey, ccert, "Ana", [BUS], T0, 4)
    refused = httpx.get(base + "/", timeout=30)
    assert refused.status_code == 401
    assert "Acesso negado: sem token" in refused.text
    wrong = issue(ckey, ccert, "Ana", [OTHER], T0, 4)
    assert "não vale para o veículo ABC1D23" in httpx.get(base + "/", params={"t": wrong}).text
    shown = httpx.get(base + "/", params={"t": token}, timeout=30)
    assert shown.status_code == 200, shown.text[:300]
    text = shown.text
    assert "Veículo ABC1D23" in text
    assert "<svg" in text
    assert "90 km/h" in text                  # the top of 60 + m % 31 over m < 60 (m = 30)
    assert "Registros de velocidade</th><td>60" in text
    # local time (UTC−3) with dates: the newest frame T0 + 59 min = 11:59 local on 02/03, the
    # period the 24 h before it; the token (T0 + 4 h) expires at 15:00 local
    assert "01/03/2026 11:59:00 a 02/03/2026 11:59:00 (últimas 24 h" in text
    assert "token válido até 02/03/2026 15:00:00" in text
    assert "<h2>Disco do dia 02/03/2026</h2>" in text
    assert re.search(r"Distância no dia</th><td>\d+,\d km", text)
    zipped = httpx.get(base + "/pacote", params={"t": token}, timeout=30)
    assert zipped.status_code == 200
    assert zipped.headers["content-type"] == "application/zip"
    report = check_bundle(zipped.content, identity.load_cert_file(fleet.ca))
    assert report.intact, report.problems
    assert (report.records, report.signer_role, report.signer_name) == (60, "vehicle", BUS)
    folder = load_config(fleet.agent_toml).buffer.path.parent
    reads = [json.loads(line)["read"] for line in
             (folder / "roadside.log").read_text().splitlines()]
    assert reads == ["page", "bundle"]
    (export,) = (folder / "exports.log").read_text().splitlines()
    assert json.loads(export)["to"].startswith("inspector Ana")


def test_the_page_fits_a_phone_in_chromium(browser: Any,  # noqa: F811
                                           page: tuple[str, Fleet, list[int]]) -> None:
    """The inspector's phone: no console error, nothing wider than 390 px (screenshots
    roadside-390.png and -1280.png beside the collector pages')."""
    from types import SimpleNamespace
    from urllib.parse import quote

    base, fleet, _ = page
    ckey, ccert = _collector_key(fleet)
    token = issue(ckey, ccert, "Ana", [BUS], T0, 4)
    server: Any = SimpleNamespace(base=base)
    text = page_ok(browser, server, f"/?t={quote(token, safe='')}", "roadside")
    assert "Veículo ABC1D23" in text
    assert "90 km/h" in text                  # the top of 60 + m % 31 over m < 60 (m = 30)


def test_an_expired_token_stays_expired_on_a_pi_that_booted_in_the_past(
        page: tuple[str, Fleet, list[int]]) -> None:
    base, fleet, clock = page
    ckey, ccert = _collector_key(fleet)
    # valid T0 - 2 h to T0 - 1 h; the records reach T0 + 59 min, so it has expired, even if
    # the Pi's clock says T0 - 90 min
    token = issue(ckey, ccert, "Ana", [BUS], T0 - 2 * HOUR, 1)
    clock[0] = T0 - 90 * 60_000
    refused = httpx.get(base + "/pacote", params={"t": token}, timeout=30)
    assert refused.status_code == 401
    assert "expirou" in refused.text


def test_a_token_whose_collector_certificate_expired_is_refused_on_the_page(
        page: tuple[str, Fleet, list[int]]) -> None:
    base, fleet, _ = page
    ckey, ccert = _collector_key(fleet)
    # the same collector key, certified by the fleet CA until T0 + 30 min only; a token within
    # it (T0 to T0 + 30 min); the page's now (its clock, T0 + 1 h) is past the certificate
    ca_key = identity.load_ca_key(fleet.folder / "ca" / "ca.key")
    short = identity.certify_signing_key(ca_key, identity.load_cert_file(fleet.ca), "main",
                                         "collector", ckey.public_key(), days=1 / 48,
                                         not_before=dt.datetime(2026, 3, 2, 14, tzinfo=dt.UTC))
    token = issue(ckey, short, "Ana", [BUS], T0, 0.5)
    refused = httpx.get(base + "/", params={"t": token}, timeout=30)
    assert refused.status_code == 401
    assert "o certificado do coletor main expirou em 02/03/2026 14:30:00 UTC" in refused.text
    # the same token from the provisioned certificate (valid for years) is accepted
    assert httpx.get(base + "/", params={"t": issue(ckey, ccert, "Ana", [BUS], T0, 4)},
                     timeout=30).status_code == 200


def test_page_options_are_checked_before_serving(fleet: Fleet,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    base = ["agent", "page", "--config", str(fleet.agent_toml)]
    assert main([*base, "--listen", "8080"]) == 1
    assert "--listen '8080' is not HOST:PORT" in capsys.readouterr().err
    # every interface would put the page on the cellular modem's address too
    for wildcard in ("0.0.0.0:8080", "[::]:8080"):
        assert main([*base, "--listen", wildcard]) == 1
        assert "every interface" in capsys.readouterr().err
    assert main([*base, "--listen", "127.0.0.1:8080", "--timezone", "Mars/Olympus"]) == 1
    assert "is not a time zone" in capsys.readouterr().err
