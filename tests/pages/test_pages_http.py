"""The pages over a real socket without a browser: login with a token, the session cookie,
CSRF on every form, roles (a fiscal does not enter reports; an operador sees its fleet only)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.pages.conftest import Server
from tests.pages.fleet import AZUL, DAY, VERDE


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


@contextmanager
def login(server: Server, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base, timeout=30) as client:
        form = client.get("/entrar")
        assert form.status_code == 200
        response = client.post("/entrar", data={"token": token, "csrf": _csrf(form.text),
                                                "volta": "/"})
        assert response.status_code == 303
        assert "frota_sessao" in client.cookies
        yield client


def test_pages_need_a_login(server: Server) -> None:
    for path in ("/", f"/disco/FRT1A01?dia={DAY}", "/jornada/D-1001", "/ocorrencias",
                 "/estatisticas", "/estatisticas.csv"):
        response = httpx.get(server.base + path, timeout=30)
        assert response.status_code == 303, path
        assert response.headers["location"].startswith("/entrar")


def test_login_checks_the_token_and_the_csrf(server: Server) -> None:
    with httpx.Client(base_url=server.base, timeout=30) as client, \
            httpx.Client(base_url=server.base, timeout=30) as other:
        csrf = _csrf(client.get("/entrar").text)
        assert client.post("/entrar", data={"token": "frota_00000000_" + "A" * 43,
                                            "csrf": csrf}).status_code == 401
        assert client.post("/entrar", data={"token": server.token("fiscal"),
                                            "csrf": "forged"}).status_code == 403
        # another client has no CSRF cookie at all
        assert other.post("/entrar", data={"token": server.token("fiscal"),
                                           "csrf": csrf}).status_code == 403
        assert all(c.has_nonstandard_attr("HttpOnly") for c in client.cookies.jar)


def test_a_removed_token_ends_the_session(server: Server) -> None:
    from collector import tokens

    token = server.token("fiscal")
    with login(server, token) as client:
        assert client.get("/").status_code == 200
        tokens.remove(server.tokens_file, token.split("_")[1])
        assert client.get("/").status_code == 303
        with httpx.Client(base_url=server.base, timeout=30, cookies={
                "frota_sessao": client.cookies["frota_sessao"] + "x"}) as forged:
            assert forged.get("/").status_code == 303


def test_logging_out_ends_the_session_wherever_its_cookie_was_copied(server: Server) -> None:
    with login(server, server.token("fiscal")) as client:
        copied = client.cookies["frota_sessao"]
        assert client.get("/").status_code == 200
        assert client.post("/sair", data={"csrf": _csrf(client.get("/").text)}).status_code == 303
        with httpx.Client(base_url=server.base, timeout=30,
                          cookies={"frota_sessao": copied}) as other:
            assert other.get("/").status_code == 303      # to the login: the session ended
    # another session of the same token is not ended by it
    with login(server, server.token("fiscal")) as client:
        assert client.get("/").status_code == 200


def test_an_operador_sees_its_fleet_only(server: Server) -> None:
    with login(server, server.token("operador", AZUL)) as client:
        home = client.get("/").text
        assert "FRT1A01" in home
        assert "FRT2B02" not in home
        assert client.get(f"/disco/FRT2B02?dia={DAY}").status_code == 404
        assert client.get("/viagem/FRT2B02/T2002-0303-1030").status_code == 404
        assert "FRT2B02" not in client.get("/ocorrencias").text
        assert client.get("/disco/FRT1A01?dia=2026-13-01").status_code == 400
        for path in ("/disco/FRT1A01?dia=9999-12-31", "/jornada/D-1001?dia=9999-12-31",
                     "/ocorrencias?de=9999-12-31", "/ocorrencias?ate=0001-01-01"):
            assert client.get(path).status_code == 400, path


def test_a_fiscal_may_not_close_a_deadline(own_server: Server) -> None:
    finding = own_server.get("/findings?severity=deadline",
                             own_server.token("fiscal")).json()["findings"][0]["id"]
    with login(own_server, own_server.token("fiscal")) as client:
        page = client.get("/ocorrencias?abertas=true").text
        assert "Registrar" not in page                  # no form for a fiscal
        response = client.post("/ocorrencias/relato",
                               data={"csrf": _csrf(page), "finding": finding, "to": "passengers"})
        assert response.status_code == 403


def test_an_operador_closes_a_deadline_with_the_csrf_of_the_form(own_server: Server) -> None:
    with login(own_server, own_server.token("operador", VERDE)) as client:
        page = client.get("/ocorrencias?abertas=true").text
        finding = re.search(r'name="finding" value="([^"]+)"', page)
        assert finding is not None
        data = {"finding": finding.group(1), "to": "passengers"}
        assert client.post("/ocorrencias/relato", data={**data, "csrf": "forged"}).status_code == 403
        response = client.post("/ocorrencias/relato", data={**data, "csrf": _csrf(page)})
        assert response.status_code == 303
    stored = [line for line in own_server.store.records("FRT2B02") if '"kind":"report"' in line]
    assert len(stored) == 1
    assert finding.group(1) in stored[0]


def test_finding_details_are_in_local_time(server: Server) -> None:
    from zoneinfo import ZoneInfo

    from collector.web import words

    # 14:10:37Z is 11:10:37 in São Paulo (UTC−3, no daylight saving in 2026)
    finding = {"details": {"due": "2026-03-03T14:10:37.000Z", "duration_min": 130.05,
                           "cause": "breakdown", "open": True, "replacement": None,
                           "note": "2026-03-03T99:99:99.000Z"}}
    assert words.details(finding, ZoneInfo("America/Sao_Paulo")) == (
        "due: 03/03/2026 11:10:37; duration_min: 130,05; cause: breakdown; open: sim; "
        "replacement: —; note: 2026-03-03T99:99:99.000Z")
    # the pages: no instant left in UTC among a trip's findings
    with login(server, server.token("fiscal")) as client:
        page = client.get("/viagem/FRT2B02/T2002-0303-1030").text
        assert "interrupção da viagem" in page
        assert ".000Z" not in page
