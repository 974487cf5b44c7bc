"""*Estatísticas*: the monthly passengers, trips and occupancy index per line, as the rules
engine reports them (``occupancy.index`` findings, one per line and finished local month:
docs/rules.md), and their CSV."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass

from collector.tokens import Token
from collector.web.context import Filters, Web

INDEX_RULE = "occupancy.index"
CSV_COLUMNS = ("linha", "perfil", "mes", "viagens", "passageiros", "passageiros_km", "lugares_km",
               "indice", "limite", "insuficiente", "fundamento")


@dataclass(frozen=True)
class MonthRow:
    """One line in one month."""

    linha: str
    perfil: str
    mes: str
    viagens: int
    passageiros: int
    passageiros_km: float
    lugares_km: float
    indice: float
    limite: float | None
    insuficiente: bool | None
    fundamento: str


def monthly(web: Web, user: Token) -> tuple[list[MonthRow], int | None]:
    """The rows (by month, then line) and the ``as_of`` of the findings they come from. Lines
    carry no operator in the registry: every role sees every line's statistics."""
    found, as_of = web.findings(user if user.role != "operador" else _any(user), Filters(rule=INDEX_RULE))
    rows = []
    for f in found:
        d = f.get("details") or {}
        rows.append(MonthRow(str(f.get("line")), str(f.get("profile")), str(d.get("month")),
                             int(d.get("trips", 0)), int(d.get("passengers", 0)),
                             float(d.get("passenger_km", 0)), float(d.get("seat_km", 0)),
                             float(d.get("index", 0)), d.get("limit"), d.get("insufficient"),
                             "; ".join(f.get("basis") or ())))
    rows.sort(key=lambda r: (r.mes, r.linha))
    return rows, as_of


def _any(user: Token) -> Token:
    """Line statistics have no vehicle: read them as a fiscal would."""
    from dataclasses import replace

    return replace(user, role="fiscal", operator=None)


def to_csv(rows: list[MonthRow]) -> str:
    """The rows as CSV (comma-separated, a header line, numbers with a decimal point,
    ``insuficiente`` as ``sim``/``não`` — empty when the profile sets no limite — in the
    header's language, not Python's ``True``/``False``)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    for row in rows:
        cells = asdict(row)
        flag = cells["insuficiente"]
        cells["insuficiente"] = "" if flag is None else ("sim" if flag else "não")
        writer.writerow(cells)
    return out.getvalue()
