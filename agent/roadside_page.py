"""The bus's roadside page (issue 17 item 4; ``docs/roadside.md``): a small read-only page on the
bus's local network for an inspector's phone — the last 24 hours in figures, the *Disco do dia*
of the newest record's local day, and the signed bundle of the last 24 hours.

Every request needs an inspector's token (``protocols/inspector_token.py``) issued by a collector
and checked here offline against the fleet CA; "now" is the later of the Pi's clock and the newest
device time in the buffer. The buffer is opened read-only per request (the agent keeps writing). Every
read is logged (``roadside.log`` beside the buffer: token id, inspector, what) and every bundle
too (``exports.log``, as ``frota agent export``). The disc is the collector's own drawing
(``collector/web/dayview.py`` and ``svg.py``) over :class:`BufferDay`, which reads the buffer
as the collector's store would. No TLS here: see docs/roadside.md, "Where TLS ends".
"""

from __future__ import annotations

import html
import ipaddress
import logging
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Annotated
from urllib.parse import quote
from zoneinfo import ZoneInfo

from cryptography import x509
from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, Response

from agent import hostclock
from agent.buffer_rows import bodies_source
from agent.config import AgentConfig
from agent.export import ExportError, append_log, bundle_bytes, log_export
from protocols.inspector_token import Grant, TokenError, check
from protocols.records import ms_to_ts

log = logging.getLogger(__name__)
ROADSIDE_LOG = "roadside.log"
#: The speed under which the bus counts as stopped (km/h), as the collector's default profile.
STOP_KMH = 3.0


class BufferDay:
    """The two reads the collector's day view makes (``speeds`` and ``events``), from the
    agent's buffer (one vehicle)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)

    def close(self) -> None:
        """Close the read-only connection."""
        self.conn.close()

    def speeds(self, vehicle: str, kind: str, since_ms: int, until_ms: int) -> list[tuple[int, float]]:
        """(ts ms, kmh) of ``kind`` records in [since, until), in ts order."""
        rows = self.conn.execute(
            "SELECT ts_ms, json_extract(body, '$.kmh') FROM records WHERE kind = ? AND ts_ms >= ? "
            "AND ts_ms < ? ORDER BY ts_ms", (kind, since_ms, until_ms)).fetchall()
        return [(int(ms), float(kmh)) for ms, kmh in rows if isinstance(kmh, int | float)]

    def speed_columns(self, vehicle: str, kind: str, since_ms: int,
                      until_ms: int) -> tuple[list[int], list[float]]:
        """:meth:`speeds` as two lists (ts ms, kmh): what the day view reads since it takes the
        collector's ``Store.speed_columns``."""
        pairs = self.speeds(vehicle, kind, since_ms, until_ms)
        return [ms for ms, _ in pairs], [kmh for _, kmh in pairs]

    def events(self, vehicle: str, since_ms: int, until_ms: int, exact: bool = True) -> list[str]:
        """Bodies of the non-sample records in [since, until), in (ts, seq) order."""
        rows = self.conn.execute(
            f"SELECT body FROM {bodies_source(self.conn)} WHERE ts_ms >= ? AND ts_ms < ? AND "
            "kind NOT IN ('speed', 'position') ORDER BY ts_ms, seq", (since_ms, until_ms)
        ).fetchall()
        return [str(b) for (b,) in rows]

    def newest_ms(self) -> int | None:
        """The newest record's device time."""
        (ms,) = self.conn.execute("SELECT MAX(ts_ms) FROM records").fetchone()
        return None if ms is None else int(ms)


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        '<!doctype html><html lang="pt-BR"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'  # no /favicon.ico request (a 404 on the phone's console)
        f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:1em;"
        "max-width:40em}svg{max-width:100%;height:auto}td{padding:.2em .6em}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>", status_code=status)


def make_app(config: AgentConfig, fleet_ca: x509.Certificate, zone: ZoneInfo,
             clock: Callable[[], int] = hostclock.wall_ms) -> FastAPI:
    """The page's app for the agent's ``config``; tokens checked against ``fleet_ca``."""
    app = FastAPI(title="Frota: página do fiscal", docs_url=None, redoc_url=None,
                  openapi_url=None)
    vehicle = config.vehicle

    def grant(token: str | None, newest: int | None) -> Grant:
        if not token:
            raise TokenError("no token", "sem token")
        # now: the later of the Pi's clock and the newest device time (docs/roadside.md)
        return check(token, fleet_ca, vehicle, max(clock(), newest or 0))

    def logged(g: Grant, what: str, request: Request) -> None:
        client = request.client.host if request.client else "?"
        log.info("roadside: inspector %r (token %s, collector %s) from %s read %s", g.inspector,
                 g.id, g.collector, client, what)
        append_log(config, ROADSIDE_LOG, {"at": ms_to_ts(clock()), "token": g.id,
                                          "inspector": g.inspector, "collector": g.collector,
                                          "client": client, "read": what})

    def refused(err: TokenError) -> HTMLResponse:
        form = ('<form method="get" action="/"><label>Token do fiscal <input name="t" '
                'autocomplete="off"></label> <button>Entrar</button></form>')
        return _page(f"Veículo {vehicle}", f"<p>Acesso negado: {html.escape(err.portuguese)}.</p>"
                     + form, 401)

    def open_day() -> BufferDay | None:
        try:
            return BufferDay(config.buffer.path)
        except sqlite3.Error:
            return None

    @app.get("/", response_class=HTMLResponse)
    def home(request: Request, t: Annotated[str | None, Query(max_length=4096)] = None) -> Response:
        from collector.registry import Registry
        from collector.web import dayview, svg
        from collector.web.localtime import Day, local, stamp
        from collector.web.words import number

        day_store = open_day()
        try:
            newest = day_store.newest_ms() if day_store is not None else None
            try:
                g = grant(t, newest)
            except TokenError as err:
                return refused(err)
            logged(g, "page", request)
            if day_store is None or newest is None:
                return _page(f"Veículo {vehicle}", "<p>Nenhum registro no veículo.</p>")
            lo = newest + 1 - 86_400_000
            speeds = day_store.speeds(vehicle, "speed", lo, newest + 1)
            events = day_store.events(vehicle, lo, newest + 1)
            today = Day.of(local(newest, zone).date(), zone)
            d = dayview.vehicle_day(day_store, Registry((), (), ()), vehicle,  # type: ignore[arg-type]
                                    today, STOP_KMH)
        except sqlite3.Error as err:
            return _page(f"Veículo {vehicle}", f"<p>Erro ao ler os registros: {html.escape(str(err))}</p>",
                         503)
        finally:
            if day_store is not None:
                day_store.close()
        top = max((kmh for _, kmh in speeds), default=None)
        drivers = sum(1 for e in events if '"kind":"driver"' in e)
        q = quote(t or "", safe="")
        # local time with the date (the period spans two days), the decimal comma
        rows = [("Período", f"{stamp(lo, zone)} a {stamp(newest, zone)} (últimas 24 h, hora "
                 f"local {zone.key})"),
                ("Registros de velocidade", str(len(speeds))),
                ("Velocidade máxima", "—" if top is None else f"{number(top, 0)} km/h"),
                ("Eventos (condutor, viagem, portas, equipamento)", str(len(events))),
                ("Registros de condutor", str(drivers)),
                ("Distância no dia", f"{number(d.distance_km, 1)} km"),
                ("Fiscal", f"{g.inspector} (token válido até {stamp(g.expires_ms, zone)})")]
        table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                        for k, v in rows)
        body = (f"<table>{table}</table><h2>Disco do dia {local(newest, zone):%d/%m/%Y}"
                f"</h2>{svg.disc(d)}<p><a href=\"/pacote?t={q}\">Baixar o pacote assinado (últimas "
                "24 h)</a> — confira com <code>frota verify PACOTE --ca ca.crt</code>.</p>")
        return _page(f"Veículo {vehicle}", body)

    @app.get("/pacote")
    def bundle(request: Request, t: Annotated[str | None, Query(max_length=4096)] = None) -> Response:
        day_store = open_day()
        try:
            newest = day_store.newest_ms() if day_store is not None else None
        except sqlite3.Error:
            newest = None
        finally:
            if day_store is not None:
                day_store.close()
        try:
            g = grant(t, newest)
        except TokenError as err:
            return refused(err)
        try:
            data, made = bundle_bytes(config, 1)
        except ExportError as err:
            return _page(f"Veículo {vehicle}", f"<p>Pacote indisponível: {html.escape(str(err))}</p>",
                         503)
        logged(g, "bundle", request)
        log_export(config, made, f"inspector {g.inspector} (token {g.id})")
        name = f"frota-{vehicle}-{ms_to_ts(made.until_ms or clock())[:10]}.zip"
        return Response(data, media_type="application/zip",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    return app


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of ``--listen`` (ValueError says what is wrong). Every interface
    (``0.0.0.0``, ``::``) is refused: the page belongs on the bus's local network only, never
    on the cellular modem's address (docs/roadside.md, "Where TLS ends")."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r} is not HOST:PORT")
    if _every_interface(host):
        raise ValueError(f"--listen {text!r} is every interface, the cellular modem's too: give "
                         "the address of the bus's local network (its Wi-Fi)")
    return host, int(port)


def _every_interface(host: str) -> bool:
    """Whether binding ``host`` listens on every interface. Not only ``0.0.0.0`` and ``::``:
    the server resolves what it is given (``getaddrinfo``), and ``0``, ``0.0``, ``0x0`` or
    ``000.000.000.000`` are 0.0.0.0 to it, ``::ffff:0.0.0.0`` every IPv4 interface; so the
    host is resolved as the server will, and each address it gives is looked at."""
    try:
        found = [str(info[4][0]) for info in
                 socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]
    except (OSError, UnicodeError):  # not resolved: the server will say so
        found = [host]
    for text in found:
        try:
            address = ipaddress.ip_address(text.partition("%")[0])
        except ValueError:
            continue
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        if address.is_unspecified or (mapped is not None and mapped.is_unspecified):
            return True
    return False


def serve(config: AgentConfig, fleet_ca: x509.Certificate, zone: ZoneInfo, host: str,
          port: int) -> None:
    """Serve the page until SIGTERM/SIGINT."""
    import uvicorn

    uvicorn.run(make_app(config, fleet_ca, zone), host=host, port=port, log_level="warning")


__all__ = ["ROADSIDE_LOG", "BufferDay", "listen_address", "make_app", "serve"]
