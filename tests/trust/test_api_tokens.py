"""The HTTP API behind tokens, over a real socket (uvicorn on a free port): 401 without a valid
token, 403 for a route the role may not use, 404 for a vehicle outside an operador's fleet."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from collector import tokens
from collector.config import ConfigError, parse_config
from collector.http import Access, make_app
from collector.ingest import Ingest
from collector.store import open_store, record_row
from frota.cli import main
from tests.collector.helpers import T0, speed
from tests.services import serve_app

MINE, THEIRS, NOBODYS = "ABC1D23", "XYZ9K88", "QQQ0Q00"
OPERATORS = {MINE: "Viação Azul", THEIRS: "Expresso Verde", NOBODYS: None}


@dataclass
class Api:
    base: str
    tokens_file: Path

    def get(self, path: str, token: str | None = None, **headers: str) -> httpx.Response:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.get(self.base + path, headers=headers, timeout=10)

    def token(self, role: str, operator: str | None = None) -> str:
        return tokens.add(self.tokens_file, role, operator)[1]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    store = open_store(str(tmp_path / "collector.db"))
    rows = [record_row(speed(v, "a1", 1), T0) for v in OPERATORS]
    store.put(rows, (), [(v, T0 + 1000, T0 + 2000, "a1") for v in OPERATORS])
    ingest = Ingest(store, lambda: frozenset(OPERATORS))
    tokens_file = tmp_path / "tokens.json"
    access = Access(tokens.Tokens(tokens_file), lambda: OPERATORS)
    app = make_app(ingest, lambda: frozenset(OPERATORS), access=access,
                   allowed_hosts=["127.0.0.1", "localhost"])
    try:
        with serve_app(app) as base:
            yield Api(base, tokens_file)
    finally:
        store.close()


ROUTES = ("/health", f"/records?vehicle={MINE}&since=2026-01-01T00:00:00Z", "/tokens",
          "/openapi.json")


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_needs_a_valid_token(api: Api, route: str) -> None:
    good = api.token("admin")
    forged = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    for token in (None, "frota_00000000_" + "A" * 43, forged, "not a token"):
        response = api.get(route, token)
        assert response.status_code == 401, (route, token)
        assert response.headers["www-authenticate"] == "Bearer"
    assert api.get(route, good).status_code in (200, 503)  # 503: /health, no broker here


def test_an_operador_sees_its_own_fleet_only(api: Api) -> None:
    token = api.token("operador", "Viação Azul")
    health = api.get("/health", token)
    assert set(health.json()["vehicles"]) == {MINE}
    since = "since=2026-01-01T00:00:00Z"
    assert api.get(f"/records?vehicle={MINE}&{since}", token).status_code == 200
    for other in (THEIRS, NOBODYS, "UNKNOWN1"):
        assert api.get(f"/records?vehicle={other}&{since}", token).status_code == 404
        assert api.get(f"/health?vehicle={other}", token).status_code == 404
    assert api.get("/tokens", token).status_code == 403


def test_a_fiscal_reads_any_vehicle_but_does_not_manage(api: Api) -> None:
    token = api.token("fiscal")
    assert set(api.get("/health", token).json()["vehicles"]) == set(OPERATORS)
    for vehicle in OPERATORS:
        response = api.get(f"/records?vehicle={vehicle}&since=2026-01-01T00:00:00Z", token)
        assert response.status_code == 200
        assert response.text.count("\n") == 1
    assert api.get("/records?vehicle=UNKNOWN1&since=2026-01-01T00:00:00Z", token).status_code == 404
    assert api.get("/tokens", token).status_code == 403


def test_an_admin_manages_and_the_api_is_described_by_openapi(api: Api) -> None:
    admin = api.token("admin")
    api.token("operador", "Viação Azul")
    listed = api.get("/tokens", admin).json()["tokens"]
    assert sorted(t["role"] for t in listed) == ["admin", "operador"]
    assert all(set(t) == {"id", "role", "operator", "created"} for t in listed)
    spec = api.get("/openapi.json", admin).json()
    assert {"/health", "/records", "/tokens"} <= set(spec["paths"])
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_a_host_outside_the_allow_list_is_refused(api: Api) -> None:
    token = api.token("admin")
    assert api.get("/tokens", token, Host="evil.example").status_code == 400
    assert api.get("/tokens", token, Host="localhost:8080").status_code == 200


def test_tokens_are_kept_hashed_and_a_removed_one_stops_working(api: Api) -> None:
    token = api.token("fiscal")
    text = api.tokens_file.read_text()
    assert token not in text
    # frota_<id>_<secret>: the secret (token_urlsafe) may itself hold "_", or start with one
    assert token.split("_", 2)[2] not in text
    assert stat.S_IMODE(api.tokens_file.stat().st_mode) == 0o600
    assert api.get("/tokens", token).status_code == 403
    assert tokens.remove(api.tokens_file, token.split("_")[1])
    assert api.get("/tokens", token).status_code == 401


def test_token_add_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "fleet.json").write_text('{"vehicles": []}')
    config = tmp_path / "collector.toml"
    config.write_text('registry = "fleet.json"\n[http]\ntokens_file = "tokens.json"\n')
    assert main(["collector", "token", "add", "--config", str(config), "--role", "operador",
                 "--operator", "Viação Azul"]) == 0
    printed = capsys.readouterr().out.strip()
    found = tokens.Tokens(tmp_path / "tokens.json").check(printed)
    assert found is not None
    assert (found.role, found.operator) == ("operador", "Viação Azul")
    assert main(["collector", "token", "add", "--config", str(config), "--role", "operador"]) == 1
    assert "needs --operator" in capsys.readouterr().err


def test_an_api_without_tokens_may_only_listen_on_loopback(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"http\.tokens_file: required"):
        parse_config('registry = "r.json"\n[http]\nhost = "0.0.0.0"\n', tmp_path)
    parse_config('registry = "r.json"\n[http]\nhost = "0.0.0.0"\ntokens_file = "t.json"\n', tmp_path)
    parse_config('registry = "r.json"\n[http]\nhost = "127.0.0.1"\n', tmp_path)
