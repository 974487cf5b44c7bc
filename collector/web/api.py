"""The API behind each page (JSON, the same tokens as ``/records``; described by
``/openapi.json``): vehicles, a vehicle's day, a driver's day, a trip, findings, statistics,
and closing a deadline with a report. Errors as the rest of the API: 401 without a valid token,
403 for a role that may not use the route, 404 for what does not exist or is outside an
operador's fleet, 400 for bad input."""

from __future__ import annotations

import io
import logging
from datetime import date
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from fastapi import FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from collector.entries import entries as operator_entries
from collector.http import Caller
from collector.localtime import LocalTimeError, person_time_ms
from collector.store import StoreError
from collector.web import accident, dayview, export, stats, tripview
from collector.web.context import Filters, NotFoundError, Web
from collector.web.entries import EntryError, close_deadline, withdraw_entry
from collector.web.localtime import DayRangeError
from collector.web.overview import fleet_rows
from protocols.records import (
    MAX_REASON_CHARS,
    VEHICLE_ID_PATTERN,
    ms_to_ts,
    now_ms,
)

log = logging.getLogger(__name__)

Severity = Literal["infraction", "warning", "deadline", "report", "notice"]
VehicleId = Annotated[str, Path(pattern=VEHICLE_ID_PATTERN)]
DriverId = Annotated[str, Path(min_length=1, max_length=64)]
TripId = Annotated[str, Path(min_length=1, max_length=128)]


class ReportIn(BaseModel):
    """A report answering an open deadline."""

    to: str = Field(min_length=1, max_length=200,
                    description="the authority reported to, or 'passengers' for assistance given")


class WithdrawalIn(BaseModel):
    """Why an operator entry is withdrawn."""

    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS,
                        description="why the entry is withdrawn (recorded in the signed entry)")


def _missing(err: NotFoundError) -> HTTPException:
    return HTTPException(status_code=404, detail=str(err))


def _when(name: str, value: str | None, zone: ZoneInfo) -> int | None:
    """A query's time typed by a person: RFC 3339, or a date (its first instant in ``zone``)."""
    if value is None:
        return None
    try:
        return person_time_ms(value, zone)
    except LocalTimeError as err:
        raise HTTPException(status_code=400, detail=f"query {name}: {err}") from None


def _ms(ms: int | None) -> str | None:
    return None if ms is None else ms_to_ts(ms)


def add_api(app: FastAPI, web: Web) -> None:
    """Add the data routes to ``app`` (``Caller`` checks the token, as for ``/records``)."""

    @app.exception_handler(DayRangeError)
    async def _day_range(_request: Request, err: DayRangeError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(err)})

    @app.get("/vehicles", tags=["pages"])
    def vehicles(token: Caller) -> JSONResponse:
        """Every vehicle the caller may see: status, newest record, lag, last speed and
        position, open findings (the *Frota* page)."""
        rows = fleet_rows(web, token, now_ms())
        return JSONResponse({"vehicles": [
            {k: v for k, v in r.as_dict().items() if k != "last_ms"} | {"last_ts": _ms(r.last_ms)}
            for r in rows]})

    @app.get("/vehicles/{vehicle}/days/{day}", tags=["pages"])
    def vehicle_day(token: Caller, vehicle: VehicleId, day: date) -> JSONResponse:
        """A vehicle's local day (the *Disco do dia*): per-minute maximum and minimum speed and
        movement, distance, time moving, maximum speed, driver changes, compartment openings,
        trips. Times are UTC; ``timezone`` is the day's."""
        try:
            web.check_vehicle(token, vehicle)
        except NotFoundError as err:
            raise _missing(err) from None
        d = dayview.vehicle_day(web.store, web.registry(), vehicle, web.day(day, vehicle), web.stop_kmh)
        return JSONResponse({
            "vehicle": vehicle, "day": day.isoformat(), "timezone": d.day.tz.key,
            "from": _ms(d.day.lo_ms), "to": _ms(d.day.hi_ms), "source": d.source,
            "samples": d.samples, "max_kmh": d.max_kmh, "max_at": _ms(d.max_at_ms),
            "moving_min": round(d.moving_ms / 60_000, 2), "distance_km": round(d.distance_km, 3),
            "minutes": [None if m is None else {"max_kmh": m[0], "min_kmh": m[1], "moving": m[2]}
                        for m in d.minutes],
            "driver_changes": [e.record for e in d.driver_changes],
            "compartment_openings": [e.record for e in d.openings],
            "trips": [{"trip": t, "start": _ms(ms), "line": line} for t, ms, line in d.trips],
        })

    @app.get("/drivers/{driver}/days/{day}", tags=["pages"])
    def driver_day(token: Caller, driver: DriverId, day: date) -> JSONResponse:
        """A driver's local day across the vehicles the caller may see (the *Jornada*): pieces of
        drive / work / available / rest, totals in minutes, breaks, driver-time findings."""
        try:
            driver_id = web.check_driver(driver)
        except NotFoundError as err:
            raise _missing(err) from None
        local = web.day(day)
        dd = dayview.driver_day(web.store, web.registry(), driver_id, local, web.vehicles(token),
                                web.stop_kmh)
        found, _ = web.findings(token, Filters(driver=driver_id, since_ms=local.lo_ms,
                                               until_ms=local.hi_ms))
        return JSONResponse({
            "driver": driver_id, "day": day.isoformat(), "timezone": local.tz.key,
            "vehicles": dd.vehicles,
            "pieces": [{"start": _ms(p.start_ms), "end": _ms(p.end_ms), "activity": p.activity,
                        "vehicle": p.vehicle, "slot": p.slot} for p in dd.pieces],
            "totals_min": {k: round(v, 2) for k, v in dd.totals_min().items()},
            "breaks": [{"start": _ms(p.start_ms), "end": _ms(p.end_ms)} for p in dd.breaks()],
            "findings": [f for f in found if f["rule"].startswith("driver.")],
        })

    @app.get("/vehicles/{vehicle}/trips/{trip}", tags=["pages"])
    def trip(token: Caller, vehicle: VehicleId, trip: TripId) -> JSONResponse:
        """A trip (the *Viagem*): start, end, departure against the schedule, route, stops with
        the line's point they were at, passengers on board over time, findings."""
        try:
            web.check_vehicle(token, vehicle)
            t = tripview.trip_view(web.store, web.registry(), vehicle, trip, web.stop_kmh,
                                   now_ms(), web.zone(vehicle))
        except (NotFoundError, tripview.TripNotFoundError) as err:
            raise HTTPException(status_code=404, detail=str(err)) from None
        found, _ = web.findings(token, Filters(vehicle=vehicle, trip=trip))
        return JSONResponse({
            "vehicle": vehicle, "trip": trip, "line": t.line_id, "start": _ms(t.start_ms),
            "end": _ms(t.end_ms) if t.ended else None, "scheduled": _ms(t.scheduled_ms),
            "departure": _ms(t.departure_ms), "late_min": t.late_min,
            "route": [[_ms(ms), lat, lon] for ms, lat, lon in t.route],
            "stops": [{"start": _ms(s.start_ms), "end": _ms(s.end_ms), "lat": s.lat, "lon": s.lon,
                       "point": s.point, "distance_m": s.distance_m} for s in t.stops],
            "on_board": [[_ms(ms), n] for ms, n in t.on_board],
            "boarded": t.boarded, "alighted": t.alighted, "findings": found,
        })

    @app.get("/findings", tags=["pages"])
    def findings(
        token: Caller,
        vehicle: Annotated[str | None, Query(pattern=VEHICLE_ID_PATTERN)] = None,
        driver: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
        rule: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
        severity: Severity | None = None,
        profile: Annotated[str | None, Query(min_length=1, max_length=32)] = None,
        trip: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
        since: str | None = None,
        until: str | None = None,
        open: bool = False,
    ) -> JSONResponse:
        """The stored findings (the *Ocorrências*), filtered: ``since`` keeps those open or
        ending at or after it, ``until`` those starting before it (RFC 3339, or a date: that
        local day's first instant, in the vehicle's time zone, else the default profile's, as
        ``frota collector findings --since``); ``open`` only open ones."""
        try:
            if vehicle is not None:
                web.check_vehicle(token, vehicle)
            if driver is not None:
                web.check_driver(driver)
        except NotFoundError as err:
            raise _missing(err) from None
        zone = web.zone(vehicle)
        f = Filters(vehicle, driver, rule, severity, profile, trip, _when("since", since, zone),
                    _when("until", until, zone), open)
        found, as_of = web.findings(token, f)
        return JSONResponse({"as_of": _ms(as_of), "findings": found})

    @app.post("/findings/{finding}/report", tags=["pages"], status_code=201)
    def report(token: Caller, finding: Annotated[str, Path(min_length=1, max_length=128)],
               body: ReportIn) -> JSONResponse:
        """Close an open deadline by recording the report that answers it (operador, admin);
        the record is stored as ``frota collector enter report`` stores it."""
        if token.role not in ("operador", "admin"):
            raise HTTPException(status_code=403, detail=f"role {token.role} may not enter reports")
        try:
            stored = close_deadline(web, token, finding, body.to, now_ms())
        except NotFoundError as err:
            raise _missing(err) from None
        except EntryError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        except StoreError as err:
            raise HTTPException(status_code=503, detail=str(err)) from None
        return JSONResponse(status_code=201, content={"record": stored})

    @app.get("/vehicles/{vehicle}/entries", tags=["pages"])
    def entries(token: Caller, vehicle: VehicleId) -> JSONResponse:
        """The vehicle's operator entries (incidents, reports, trips, withdrawals) as stored, in
        seq order; a withdrawn one has ``withdrawn_by`` (its withdrawal's seq) beside it."""
        try:
            web.check_vehicle(token, vehicle)
        except NotFoundError as err:
            raise _missing(err) from None
        return JSONResponse({"vehicle": vehicle, "entries": operator_entries(web.store, vehicle)})

    @app.post("/vehicles/{vehicle}/entries/{seq}/withdrawal", tags=["pages"], status_code=201)
    def withdrawal(token: Caller, vehicle: VehicleId,
                   seq: Annotated[int, Path(ge=1, le=2**53 - 1)],
                   body: WithdrawalIn) -> JSONResponse:
        """Withdraw an operator entry by a later signed entry naming it (operador, admin): the
        entry stays stored, the rules stop counting it; 400 for a withdrawal or an entry
        withdrawn already (docs/records.md, ``withdrawal``)."""
        if token.role not in ("operador", "admin"):
            raise HTTPException(status_code=403,
                                detail=f"role {token.role} may not withdraw entries")
        try:
            stored = withdraw_entry(web, token, vehicle, seq, body.reason, now_ms())
        except NotFoundError as err:
            raise _missing(err) from None
        except EntryError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        except StoreError as err:
            raise HTTPException(status_code=503, detail=str(err)) from None
        return JSONResponse(status_code=201, content={"record": stored})

    @app.get("/vehicles/{vehicle}/bundle", tags=["pages"], response_model=None,
             responses={200: {"content": {"application/zip": {}}}})
    def vehicle_bundle(token: Caller, vehicle: VehicleId,
                       since: Annotated[str, Query(max_length=64)],
                       until: Annotated[str, Query(max_length=64)]) -> Response:
        """A signed bundle of the vehicle's records from ``since`` to ``until`` (RFC 3339, or a
        date: a local day's first instant), at most 31 days: canonical records, findings, the
        day charts, a manifest with hashes signed by the collector, the certificates (a ZIP;
        docs/pages.md). Every role may ask (an operador for its own vehicles); each export is
        logged."""
        try:
            web.check_vehicle(token, vehicle)
        except NotFoundError as err:
            raise _missing(err) from None
        try:
            lo = export.parse_bound("since", since, web, vehicle)
            hi = export.parse_bound("until", until, web, vehicle)
            export.check_period(lo, hi)
        except export.ExportError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        made = export.bundle_file(web, token, vehicle, lo, hi, web.signer, now_ms())
        log.info("export: token %s (%s) took the bundle of %s from %s to %s", token.id,
                 token.role, vehicle, _ms(lo), _ms(hi))
        name = f"frota-{vehicle}-{ms_to_ts(lo)[:10]}.zip"
        size = made.seek(0, io.SEEK_END)
        made.seek(0)
        return StreamingResponse(export.chunks(made), media_type="application/zip", headers={
            "Content-Disposition": f'attachment; filename="{name}"',
            "Content-Length": str(size)})

    @app.get("/findings/{finding}/bundle", tags=["pages"], response_model=None,
             responses={200: {"content": {"application/zip": {}}}})
    def accident_bundle(token: Caller,
                        finding: Annotated[str, Path(min_length=1, max_length=128)]) -> Response:
        """The accident-data export of a ``trip.accident_data`` finding (TO 58 § único; SP 43
        II; BA 34 § único): the signed bundle of the vehicle and period the finding names, with
        the finding in its manifest (``finding``). fiscal, operador (its own vehicles) and
        admin; 400 for a finding of another rule; each export is logged."""
        try:
            wanted = accident.accident_export(web, token, finding)
        except NotFoundError as err:
            raise _missing(err) from None
        except export.ExportError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        data = accident.accident_bundle(web, token, wanted, now_ms(), "API")
        return Response(data, media_type="application/zip", headers={
            "Content-Disposition": f'attachment; filename="{wanted.filename}"'})

    @app.get("/statistics", tags=["pages"], response_model=None)
    def statistics(token: Caller,
                   format: Annotated[Literal["json", "csv"], Query()] = "json") -> Any:
        """Monthly trips, passengers and occupancy index per line (the rules' ``occupancy.index``
        of each finished month); ``format=csv`` for the CSV of the *Estatísticas* page."""
        rows, as_of = stats.monthly(web, token)
        if format == "csv":
            return Response(stats.to_csv(rows), media_type="text/csv; charset=utf-8")
        return JSONResponse({"as_of": _ms(as_of), "lines": [r.__dict__ for r in rows]})
