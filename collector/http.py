"""The collector's HTTP API (FastAPI): ``/health``, ``/records``, ``/tokens``, ``/openapi.json``;
the pages and their data routes are added by :mod:`collector.web`.

Served by uvicorn in the same process as the MQTT ingest. Errors are JSON ``{"detail": "..."}``
with one line saying what is wrong: 401 without a valid API token, 403 for a route the token's
role may not use, 404 for a vehicle that is unknown or outside an ``operador``'s fleet, 400 for
bad input (and for a Host header outside ``http.allowed_hosts``). Tokens: :mod:`collector.tokens`;
roles and where TLS ends: ``docs/collector.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.middleware.trustedhost import TrustedHostMiddleware

from collector.ingest import Ingest
from collector.store_schema import DELETE_REFUSED
from collector.tokens import Token, Tokens

if TYPE_CHECKING:
    from collector.web.context import Web
from protocols.records import VEHICLE_ID_PATTERN, RecordError, ts_to_ms

log = logging.getLogger(__name__)


def _validation_message(err: RequestValidationError) -> str:
    first = err.errors()[0]
    where = " ".join(str(part) for part in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}"


@dataclass(frozen=True)
class Access:
    """Who may call the API: the token file and each vehicle's operator (from the registry)."""

    tokens: Tokens
    operators: Callable[[], Mapping[str, str | None]]


#: The caller of an API without tokens (only allowed on a loopback address, docs/collector.md).
OPEN = Token(id="open", role="admin", operator=None, created="", digest="")

_bearer = HTTPBearer(auto_error=False, description="an API token (frota collector token add)")


def _caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Token:
    """The token of the request; 401 without a valid one (when the API has tokens)."""
    access: Access | None = request.app.state.access
    if access is None:
        return OPEN
    token = None if credentials is None else access.tokens.check(credentials.credentials)
    if token is None:
        raise HTTPException(
            status_code=401,
            detail="a valid API token is required (Authorization: Bearer ...)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    log_fiscal_read(request, token)
    return token


def log_fiscal_read(request: Request, token: Token) -> None:
    """Log a request by a ``fiscal`` (issue 17: every read by an inspector is logged): the token,
    the method, the path and query, and the client. Exports are logged besides, with their
    period (collector/web/export.py)."""
    if token.role != "fiscal":
        return
    query = f"?{request.url.query}" if request.url.query else ""
    client = request.client.host if request.client else "?"
    # the path as sent, percent-encoded as the query is: decoded, a newline (%0A) or a terminal
    # escape in it would let the fiscal write a line of the audit of their own reads
    log.info("fiscal read: token %s from %s: %s %s%s", token.id, client, request.method,
             quote(request.url.path, safe=_PATH_SAFE), quote(query, safe=_QUERY_SAFE))


#: Kept as they are in a logged path (the rest percent-encoded), and in a logged query (which
#: comes percent-encoded already: only what is not printable ASCII is encoded).
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_QUERY_SAFE = "".join(map(chr, range(0x21, 0x7F)))


Caller = Annotated[Token, Depends(_caller)]


def _admin(token: Caller) -> Token:
    """The caller, who must be an admin (403 otherwise)."""
    if token.role != "admin":
        raise HTTPException(status_code=403, detail=f"role {token.role} may not use this route")
    return token


Admin = Annotated[Token, Depends(_admin)]


def make_app(
    ingest: Ingest,
    known_vehicles: Callable[[], frozenset[str]],
    *,
    stale_after_s: float = 300.0,
    access: Access | None = None,
    allowed_hosts: Sequence[str] = (),
    web: Web | None = None,
) -> FastAPI:
    """The FastAPI application over a running (or not yet connected) ingest; ``access`` None
    leaves it open (a collector listening on loopback only, the tests' and the old demo's);
    ``web`` adds the pages and their API (collector/web, docs/pages.md)."""
    app = FastAPI(
        title="Frota collector",
        description="The collector's HTTP API. Every route needs an API token "
        "(Authorization: Bearer ...). See docs/collector.md.",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.access = access
    if allowed_hosts:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    store = ingest.store

    @app.exception_handler(RequestValidationError)
    async def _bad_input(_request: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": _validation_message(err)})

    def visible(token: Token, vehicle: str) -> bool:
        if token.role != "operador" or access is None:
            return True
        return access.operators().get(vehicle) == token.operator

    def _check_vehicle(token: Token, vehicle: str, seen: Mapping[str, Any] | None = None) -> None:
        known = vehicle in known_vehicles() or (seen is not None and vehicle in seen)
        if known and visible(token, vehicle):
            return
        raise HTTPException(status_code=404, detail=f"unknown vehicle {vehicle!r}")

    @app.get("/openapi.json", include_in_schema=False)
    def openapi(_token: Caller) -> JSONResponse:
        """This API's OpenAPI description."""
        return JSONResponse(app.openapi())

    @app.get("/tokens")
    def tokens(_token: Admin) -> JSONResponse:
        """The API tokens (id, role, operator, created; never the token): admin only."""
        listed = [] if access is None else [t.public() for t in access.tokens.all()]
        return JSONResponse({"tokens": listed})

    @app.get("/health")
    def health(
        token: Caller,
        vehicle: Annotated[str | None, Query(pattern=VEHICLE_ID_PATTERN)] = None,
    ) -> JSONResponse:
        """Broker connection, rejects, and per-vehicle lag; 503 while the broker is away. An
        operador sees its own fleet's vehicles only."""
        body = ingest.health(stale_after_s)
        for name in known_vehicles():
            body["vehicles"].setdefault(name, _never_heard(name))
        body["vehicles"] = {
            name: value for name, value in sorted(body["vehicles"].items()) if visible(token, name)
        }
        if token.role == "operador":
            body.pop("rejects_payloads_dropped", None)
            body.pop("rejects_payload_bytes_dropped", None)
            body["rejects"] = sum(v["rejected"] for v in body["vehicles"].values())
        if vehicle is not None:
            _check_vehicle(token, vehicle, body["vehicles"])
            body["vehicles"] = {vehicle: body["vehicles"][vehicle]}
        body["status"] = "ok" if body["broker"]["connected"] else "broker disconnected"
        return JSONResponse(status_code=200 if body["broker"]["connected"] else 503, content=body)

    @app.delete("/records", include_in_schema=False)
    @app.delete("/vehicles/{_rest:path}", include_in_schema=False)
    def no_delete(_token: Caller) -> JSONResponse:
        """No route deletes records: only ``frota collector prune``, past the retention."""
        return JSONResponse(status_code=405, headers={"Allow": "GET"},
                            content={"detail": DELETE_REFUSED})

    @app.get("/records")
    def records(
        token: Caller,
        vehicle: Annotated[str, Query(pattern=VEHICLE_ID_PATTERN)],
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
        _check_vehicle(token, vehicle, {v.vehicle: v for v in store.vehicles()})

        def lines() -> Iterator[str]:
            for text in store.records(vehicle, bounds[0], bounds[1]):
                yield text + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    if web is not None:
        from collector.web.api import add_api
        from collector.web.pages import add_pages
        from collector.web.session import Sessions

        add_api(app, web)
        add_pages(app, web, Sessions())

    @app.get("/vehicles/{_rest:path}", include_in_schema=False)
    def no_such_route(_token: Caller) -> JSONResponse:
        """A GET under /vehicles that no route above takes: 404 (without it the DELETE route
        above would make every such path a 405). Added last: the routes above match first."""
        return JSONResponse(status_code=404, content={"detail": "Not Found"})

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
