"""The accident-data export of ``trip.accident_data`` (TO 58 § único; SP 43 II; BA 34 § único):
after an accident with victims the registrador's data of the vehicle must be sent at once. The
finding names what to send (``details.export``: the vehicle and the period, the 24 hours before
the accident); the export is the signed bundle of that vehicle and period
(:func:`collector.web.export.bundle`) with the finding named in its manifest (``finding``), so
that ``frota verify`` says what it answers. One path for the *Ocorrências* page, the API
(``GET /findings/{id}/bundle``) and ``frota collector export --finding ID``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

from collector.tokens import Token
from collector.web import export
from collector.web.context import Filters, NotFoundError, Web
from protocols.records import RecordError, ms_to_ts, ts_to_ms

log = logging.getLogger(__name__)

ACCIDENT_DATA: Final = "trip.accident_data"


@dataclass(frozen=True)
class AccidentExport:
    """What an accident-data finding asks to be sent: the finding, the vehicle, the period."""

    finding: dict[str, Any]
    vehicle: str
    since_ms: int
    until_ms: int

    @property
    def manifest_field(self) -> dict[str, Any]:
        """The manifest's ``finding``: which finding the bundle answers, and its articles."""
        f = self.finding
        return {"id": f["id"], "rule": f["rule"], "start": f["start"],
                "basis": list(f.get("basis") or [])}

    @property
    def filename(self) -> str:
        """``frota-acidente-VEHICLE-AAAA-MM-DD.zip`` (the accident's UTC date)."""
        return f"frota-acidente-{self.vehicle}-{ms_to_ts(self.until_ms)[:10]}.zip"


def accident_export(web: Web, user: Token, finding_id: str) -> AccidentExport:
    """The export a ``trip.accident_data`` finding asks for. NotFoundError for a finding the
    user cannot see; ExportError for one of another rule or without a usable period."""
    found, _ = web.findings(user, Filters())
    match = next((f for f in found if f["id"] == finding_id), None)
    if match is None:
        raise NotFoundError(f"unknown finding {finding_id!r}")
    if match["rule"] != ACCIDENT_DATA:
        raise export.ExportError(f"finding {finding_id!r} is {match['rule']}, not {ACCIDENT_DATA}: "
                                 "only an accident with victims asks for the registrador's data")
    what: Any = (match.get("details") or {}).get("export")
    try:
        vehicle, lo, hi = str(what["vehicle"]), ts_to_ms(what["from"]), ts_to_ms(what["to"])
    except (TypeError, KeyError, RecordError):
        raise export.ExportError(f"finding {finding_id!r} names no vehicle and period to "
                                 "export") from None
    web.check_vehicle(user, vehicle)
    export.check_period(lo, hi)
    return AccidentExport(match, vehicle, lo, hi)


def accident_bundle(web: Web, user: Token, wanted: AccidentExport, now_ms: int,
                    to: str) -> bytes:
    """The signed bundle of ``wanted`` (ZIP bytes); the export logged with who took it (``to``:
    how it left, e.g. ``API``, ``page``, a file's path)."""
    data = export.bundle(web, user, wanted.vehicle, wanted.since_ms, wanted.until_ms, web.signer,
                         now_ms, extra={"finding": wanted.manifest_field})
    log.info("export: token %s (%s) took the accident-data bundle of %s from %s to %s "
             "(finding %s) to %s", user.id, user.role, wanted.vehicle, ms_to_ts(wanted.since_ms),
             ms_to_ts(wanted.until_ms), wanted.finding["id"], to)
    return data
