"""The law's words for what the pages show (pt-BR), and the formats of numbers and times."""

from __future__ import annotations

from contextlib import suppress
from typing import Any
from zoneinfo import ZoneInfo

from collector.web.localtime import local
from protocols.records import RecordError, ts_to_ms

SEVERITY = {"infraction": "infração", "warning": "advertência", "deadline": "prazo",
            "report": "registro", "notice": "aviso"}
RULES = {
    "speed.over_limit": "excesso de velocidade",
    "driver.continuous_driving": "direção contínua além do limite",
    "driver.break_per_4h": "intervalo de descanso na direção",
    "driver.workday": "jornada de trabalho além do limite",
    "driver.daily_rest": "descanso diário",
    "driver.two_drivers": "dois motoristas (viagem noturna)",
    "driver.unidentified": "condutor não identificado",
    "trip.interruption": "interrupção da viagem",
    "trip.assistance_due": "assistência aos passageiros",
    "trip.report_due": "comunicação à autoridade",
    "trip.accident_data": "dados do registrador após acidente com vítimas",
    "schedule.presence": "presença no terminal antes da partida",
    "schedule.late_departure": "atraso na partida",
    "occupancy.standing": "passageiros em pé",
    "occupancy.overload": "excesso de lotação",
    "occupancy.index": "índice de aproveitamento",
    "stops.unapproved": "parada em ponto não autorizado",
    "doors.open_while_moving": "porta aberta em movimento",
    "equipment.registrador": "registrador inoperante ou violado",
}


def rule_word(rule: str) -> str:
    """The rule's name in Portuguese (its id when it has none)."""
    return RULES.get(rule, rule)


def duration(minutes: float) -> str:
    """``3 h 05 min`` / ``42 min`` / ``18 s`` / ``12 dias 3 h``."""
    if minutes < 1:
        return f"{round(minutes * 60)} s"
    total = round(minutes)
    h, m = divmod(total, 60)
    if h >= 48:
        return f"{h // 24} dias {h % 24} h"
    return f"{h} h {m:02d} min" if h else f"{m} min"


def number(value: float, places: int = 1) -> str:
    """A number with the Brazilian decimal comma and dot thousands (``1.234,5``)."""
    text = f"{value:,.{places}f}"
    return text.replace(",", "_").replace(".", ",").replace("_", ".")


def when(ts: str | None, tz: ZoneInfo) -> str:
    """A record or finding timestamp in local time, ``DD/MM HH:MM``."""
    if ts is None:
        return "em aberto"
    return local(ts_to_ms(ts), tz).strftime("%d/%m %H:%M")


def details(finding: dict[str, Any], tz: ZoneInfo | None = None) -> str:
    """The finding's details as ``key: value`` pairs (what an inspector checks by hand); with
    ``tz`` an instant (RFC 3339, as the rules write ``due``, ``interruption_start``…) in local
    time ``DD/MM/AAAA HH:MM:SS``, as the rest of the page, and a fraction with the decimal
    comma."""
    parts = []
    for key, value in (finding.get("details") or {}).items():
        if isinstance(value, (dict, list)):
            continue
        if isinstance(value, bool):
            value = "sim" if value else "não"
        elif value is None:
            value = "—"
        elif tz is not None and isinstance(value, float):
            value = repr(value).replace(".", ",")
        elif tz is not None and isinstance(value, str) and len(value) >= 20 and value[4] == "-":
            with suppress(RecordError):  # a text that only looks like a time: shown as it is
                value = local(ts_to_ms(value), tz).strftime("%d/%m/%Y %H:%M:%S")
        parts.append(f"{key}: {value}")
    return "; ".join(parts)


def local_day(ts: str, tz: ZoneInfo) -> str:
    """The local date (``AAAA-MM-DD``) of a timestamp, for links to a day's pages."""
    return local(ts_to_ms(ts), tz).date().isoformat()


def local_day_ms(ms: int, tz: ZoneInfo) -> str:
    """The local date (``AAAA-MM-DD``) of an instant."""
    return local(ms, tz).date().isoformat()
