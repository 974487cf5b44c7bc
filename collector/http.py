"""The collector's HTTP API (FastAPI): ``GET /health`` and ``GET /records``.

Served by uvicorn in the same process as the MQTT ingest. Errors are JSON ``{"detail": "..."}``
with one line saying what is wrong: 404 for an unknown vehicle, 400 for bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from collector.ingest import Ingest
from protocols.records import RecordError, ts_to_ms

#: A vehicle id as it can appear in an MQTT topic level (no '/', '+', '#', no spaces).
VEHICLE_PATTERN = r"^[^/+#\s]{1,64}$"


def _validation_message(err: RequestValidationError) -> str:
    first = err.errors()[0]
    where = " ".join(str(part) for part in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}"


def make_app(
    ingest: Ingest,
    known_vehicles: Callable[[], frozenset[str]],
    *,
    stale_after_s: float = 300.0,
) -> FastAPI:
    """The FastAPI application over a running (or not yet connected) ingest."""
    app = FastAPI(title="Frota collector", docs_url=None, redoc_url=None, openapi_url=None)
    store = ingest.store

    @app.exception_handler(RequestValidationError)
    async def _bad_input(_request: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": _validation_message(err)})

    def _check_vehicle(vehicle: str, seen: dict[str, Any] | None = None) -> None:
        if vehicle in known_vehicles() or (seen is not None and vehicle in seen):
            return
        raise HTTPException(status_code=404, detail=f"unknown vehicle {vehicle!r}")

    @app.get("/health")
    def health(
        vehicle: Annotated[str | None, Query(pattern=VEHICLE_PATTERN)] = None,
    ) -> JSONResponse:
        """Broker connection, rejects, and per-vehicle lag; 503 while the broker is away."""
        body = ingest.health(stale_after_s)
        for name in known_vehicles():
            body["vehicles"].setdefault(name, _never_heard(name))
        body["vehicles"] = dict(sorted(body["vehicles"].items()))
        if vehicle is not None:
            _check_vehicle(vehicle, body["vehicles"])
            body["vehicles"] = {vehicle: body["vehicles"][vehicle]}
        body["status"] = "ok" if body["broker"]["connected"] else "broker disconnected"
        return JSONResponse(status_code=200 if body["broker"]["connected"] else 503, content=body)

    @app.get("/records")
    def records(
        vehicle: Annotated[str, Query(pattern=VEHICLE_PATTERN)],
        since: str,
        until: str | None = None,
    ) -> StreamingResponse:
        """Stored records of a vehicle with since <= ts < until as JSON Lines, in (ts, seq) order."""
        bounds: list[int | None] = []
        for name, value in (("since", since), ("until", until)):
            try:
                bounds.append(None if value is None else ts_to_ms(value))
            except RecordError:
                raise HTTPException(
                    status_code=400, detail=f"query {name}: {value!r} is not an RFC 3339 timestamp"
                ) from None
        _check_vehicle(vehicle, {v.vehicle: v for v in store.vehicles()})

        def lines() -> Iterator[str]:
            for text in store.records(vehicle, bounds[0], bounds[1]):
                yield text + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    return app


def _never_heard(_vehicle: str) -> dict[str, Any]:
    return {
        "agent": None,
        "status": "unknown",
        "latest_record_ts": None,
        "lag_s": None,
        "last_received": None,
        "since_received_s": None,
        "batches": 0,
        "stored": 0,
        "duplicates": 0,
        "rejected": 0,
        "acks": 0,
    }
