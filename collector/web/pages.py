"""The pages (pt-BR, server-drawn SVG, no JavaScript): Frota, Disco do dia, Jornada, Viagem,
Ocorrências, Estatísticas, and the login. Routes are added to the collector's FastAPI app by
:func:`add_pages`; data comes from :class:`collector.web.context.Web`."""

from __future__ import annotations

import logging
from datetime import date
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Form, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from collector.store import StoreError
from collector.web import accident, dayview, export, stats, svg, tripview, words
from collector.web.context import Filters, NotFoundError, Web
from collector.web.entries import EntryError, close_deadline, withdraw_entry
from collector.web.localtime import FIRST_DAY, LAST_DAY, hhmm, stamp, today
from collector.web.overview import fleet_rows
from collector.web.session import LoginRequiredError, PageUser, Sessions
from protocols.records import now_ms

log = logging.getLogger(__name__)
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
TEMPLATES.env.globals.update(words=words, hhmm=hhmm, stamp=stamp, duration=words.duration,
                             number=words.number)
DAY_PATTERN = r"^\d{4}-\d{2}-\d{2}$"


def _date(text: str | None, fallback: date) -> date:
    if text is None:
        return fallback
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise HTTPException(status_code=400, detail=f"dia {text!r} não é uma data AAAA-MM-DD") from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise HTTPException(status_code=400, detail=f"dia {text!r} fora do intervalo "
                            f"{FIRST_DAY:%d/%m/%Y} a {LAST_DAY:%d/%m/%Y}")
    return day


def add_pages(app: FastAPI, web: Web, sessions: Sessions) -> None:
    """Add the pages to ``app``."""
    app.state.sessions = sessions

    def render(request: Request, name: str, user: Any, **ctx: Any) -> HTMLResponse:
        csrf = sessions.csrf(request)
        response = TEMPLATES.TemplateResponse(request, name, {"user": user, "csrf": csrf, **ctx})
        sessions.keep_csrf(request, response)
        return response

    @app.exception_handler(LoginRequiredError)
    async def _login(request: Request, _err: LoginRequiredError) -> Response:
        return RedirectResponse(f"/entrar?volta={request.url.path}", status_code=303)

    @app.exception_handler(NotFoundError)
    async def _not_found(request: Request, err: NotFoundError) -> Response:
        return TEMPLATES.TemplateResponse(request, "erro.html", {
            "user": None, "csrf": "", "mensagem": str(err)}, status_code=404)

    @app.get("/entrar", response_class=HTMLResponse, include_in_schema=False)
    def login_form(request: Request, volta: str = "/") -> HTMLResponse:
        return render(request, "entrar.html", None, volta=volta if volta.startswith("/") else "/",
                      erro=None)

    @app.post("/entrar", include_in_schema=False)
    def login(request: Request, token: Annotated[str, Form(max_length=200)],
              csrf: Annotated[str, Form(max_length=200)], volta: Annotated[str, Form()] = "/") -> Response:
        sessions.check_csrf(request, csrf)
        access = request.app.state.access
        found = None if access is None else access.tokens.check(token.strip())
        if found is None:
            response = render(request, "entrar.html", None, volta="/",
                              erro="Token inválido. Peça um ao administrador (frota collector token add).")
            response.status_code = 401
            return response
        target = volta if volta.startswith("/") and not volta.startswith("//") else "/"
        redirect = RedirectResponse(target, status_code=303)
        sessions.login(redirect, found, request.url.scheme == "https")
        return redirect

    @app.post("/sair", include_in_schema=False)
    def logout(request: Request, csrf: Annotated[str, Form(max_length=200)]) -> Response:
        sessions.check_csrf(request, csrf)
        redirect = RedirectResponse("/entrar", status_code=303)
        sessions.logout(request, redirect)
        return redirect

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def frota(request: Request, user: PageUser) -> HTMLResponse:
        rows = fleet_rows(web, user, now_ms())
        return render(request, "frota.html", user, rows=rows, tz=web.zone(), hoje=today(web.zone(), now_ms()))

    @app.get("/disco/{vehicle}", response_class=HTMLResponse, include_in_schema=False)
    def disco(request: Request, user: PageUser, vehicle: str,
              dia: Annotated[str | None, Query(pattern=DAY_PATTERN)] = None) -> HTMLResponse:
        web.check_vehicle(user, vehicle)
        when = _date(dia, today(web.zone(vehicle), now_ms()))
        d = dayview.vehicle_day(web.store, web.registry(), vehicle, web.day(when, vehicle), web.stop_kmh)
        found, _ = web.findings(user, Filters(vehicle=vehicle, since_ms=d.day.lo_ms, until_ms=d.day.hi_ms))
        return render(request, "disco.html", user, d=d, disc=Markup(svg.disc(d)),
                      timeline=Markup(svg.timeline(d)), findings=found, tz=d.day.tz,
                      withdrawn=d.withdrawn, may_withdraw=user.role in ("operador", "admin"),
                      prev=when.fromordinal(when.toordinal() - 1), next=when.fromordinal(when.toordinal() + 1))

    @app.get("/disco/{vehicle}/pacote", include_in_schema=False)
    def pacote(user: PageUser, vehicle: str,
               dia: Annotated[str, Query(pattern=DAY_PATTERN)]) -> Response:
        web.check_vehicle(user, vehicle)
        _date(dia, date.today())
        lo, hi = export.day_period(web, vehicle, dia)
        try:
            data = export.bundle(web, user, vehicle, lo, hi, web.signer, now_ms())
        except export.ExportError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        log.info("export: token %s (%s) took the bundle of %s for %s (page)", user.id, user.role,
                 vehicle, dia)
        return Response(data, media_type="application/zip", headers={
            "Content-Disposition": f'attachment; filename="frota-{vehicle}-{dia}.zip"'})

    @app.post("/disco/{vehicle}/retirar", include_in_schema=False)
    def retirar(request: Request, user: PageUser, vehicle: str,
                csrf: Annotated[str, Form(max_length=200)],
                seq: Annotated[int, Form(ge=1, le=2**53 - 1)],
                reason: Annotated[str, Form(min_length=1, max_length=200)],
                dia: Annotated[str, Form(pattern=DAY_PATTERN)]) -> Response:
        sessions.check_csrf(request, csrf)
        if user.role not in ("operador", "admin"):
            raise HTTPException(status_code=403, detail=f"o perfil {user.role} não retira entradas")
        try:
            withdraw_entry(web, user, vehicle, seq, reason.strip(), now_ms())
        except EntryError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        except StoreError as err:
            raise HTTPException(status_code=503, detail=str(err)) from None
        return RedirectResponse(f"/disco/{vehicle}?dia={dia}&retirada={seq}", status_code=303)

    @app.get("/jornada", include_in_schema=False)
    def jornada_form(user: PageUser, condutor: Annotated[str, Query(min_length=1, max_length=64)],
                     dia: Annotated[str | None, Query(pattern=DAY_PATTERN)] = None) -> Response:
        from urllib.parse import quote

        target = f"/jornada/{quote(condutor.strip(), safe='')}" + (f"?dia={dia}" if dia else "")
        return RedirectResponse(target, status_code=303)

    @app.get("/jornada/{driver}", response_class=HTMLResponse, include_in_schema=False)
    def jornada(request: Request, user: PageUser, driver: str,
                dia: Annotated[str | None, Query(pattern=DAY_PATTERN)] = None) -> HTMLResponse:
        driver_id = web.check_driver(driver)
        when = _date(dia, today(web.zone(), now_ms()))
        day = web.day(when)
        dd = dayview.driver_day(web.store, web.registry(), driver_id, day, web.vehicles(user), web.stop_kmh)
        found, _ = web.findings(user, Filters(driver=driver_id, since_ms=day.lo_ms, until_ms=day.hi_ms))
        found = [f for f in found if f["rule"].startswith("driver.")]
        return render(request, "jornada.html", user, dd=dd, chart=Markup(svg.jornada(dd)),
                      findings=found, tz=day.tz, driver=web.registry().drivers[driver_id],
                      prev=when.fromordinal(when.toordinal() - 1), next=when.fromordinal(when.toordinal() + 1))

    @app.get("/viagem/{vehicle}/{trip}", response_class=HTMLResponse, include_in_schema=False)
    def viagem(request: Request, user: PageUser, vehicle: str, trip: str) -> HTMLResponse:
        web.check_vehicle(user, vehicle)
        try:
            t = tripview.trip_view(web.store, web.registry(), vehicle, trip, web.stop_kmh, now_ms(),
                                   web.zone(vehicle))
        except tripview.TripNotFoundError as err:
            raise NotFoundError(str(err)) from None
        found, _ = web.findings(user, Filters(vehicle=vehicle, trip=trip))
        known = web.registry().vehicles.get(vehicle)
        capacity = known.max_on_board if known is not None else None
        return render(request, "viagem.html", user, t=t, tz=t.tz, route=Markup(svg.route(t)),
                      board=Markup(svg.on_board(t, capacity)), findings=found,
                      day=t.start_ms and hhmm(t.start_ms, t.tz))

    @app.get("/ocorrencias", response_class=HTMLResponse, include_in_schema=False)
    def ocorrencias(request: Request, user: PageUser,
                    veiculo: Annotated[str | None, Query(max_length=64)] = None,
                    condutor: Annotated[str | None, Query(max_length=64)] = None,
                    regra: Annotated[str | None, Query(max_length=64)] = None,
                    gravidade: Annotated[str | None, Query(max_length=16)] = None,
                    perfil: Annotated[str | None, Query(max_length=32)] = None,
                    de: Annotated[str | None, Query(pattern=DAY_PATTERN)] = None,
                    ate: Annotated[str | None, Query(pattern=DAY_PATTERN)] = None,
                    abertas: bool = False) -> HTMLResponse:
        f = Filters(vehicle=veiculo or None, driver=condutor or None, rule=regra or None,
                    severity=gravidade or None, profile=perfil or None, open_only=abertas)
        if f.vehicle is not None:
            web.check_vehicle(user, f.vehicle)
        if de:
            f.since_ms = web.day(_date(de, date.today())).lo_ms
        if ate:
            f.until_ms = web.day(_date(ate, date.today())).hi_ms
        found, as_of = web.findings(user, f)
        return render(request, "ocorrencias.html", user, findings=found, as_of=as_of, f=f,
                      tz=web.zone(), q={"veiculo": veiculo or "", "condutor": condutor or "",
                                        "regra": regra or "", "gravidade": gravidade or "",
                                        "perfil": perfil or "", "de": de or "", "ate": ate or "",
                                        "abertas": abertas},
                      rules=sorted(words.RULES), may_close=user.role in ("operador", "admin"))

    @app.post("/ocorrencias/relato", include_in_schema=False)
    def relato(request: Request, user: PageUser, csrf: Annotated[str, Form(max_length=200)],
               finding: Annotated[str, Form(max_length=128)],
               to: Annotated[str, Form(min_length=1, max_length=200)]) -> Response:
        sessions.check_csrf(request, csrf)
        if user.role not in ("operador", "admin"):
            raise HTTPException(status_code=403, detail=f"o perfil {user.role} não registra relatos")
        try:
            close_deadline(web, user, finding, to.strip(), now_ms())
        except EntryError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        except StoreError as err:
            raise HTTPException(status_code=503, detail=str(err)) from None
        return RedirectResponse("/ocorrencias?abertas=true&registrado=1", status_code=303)

    @app.get("/ocorrencias/{finding}/pacote", include_in_schema=False)
    def pacote_acidente(user: PageUser,
                        finding: Annotated[str, PathParam(min_length=1, max_length=128)]) -> Response:
        try:
            wanted = accident.accident_export(web, user, finding)
        except export.ExportError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        data = accident.accident_bundle(web, user, wanted, now_ms(), "page")
        return Response(data, media_type="application/zip", headers={
            "Content-Disposition": f'attachment; filename="{wanted.filename}"'})

    @app.get("/estatisticas", response_class=HTMLResponse, include_in_schema=False)
    def estatisticas(request: Request, user: PageUser) -> HTMLResponse:
        rows, as_of = stats.monthly(web, user)
        return render(request, "estatisticas.html", user, rows=rows, as_of=as_of, tz=web.zone())

    @app.get("/estatisticas.csv", include_in_schema=False)
    def estatisticas_csv(user: PageUser) -> Response:
        rows, _ = stats.monthly(web, user)
        return Response(stats.to_csv(rows), media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": 'attachment; filename="estatisticas.csv"'})

