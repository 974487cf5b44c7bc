"""Server-drawn SVG: the 24 h disc, the linear timeline of a day, a driver's activities, a
trip's route and passengers on board. Hand-written SVG strings: the figures are a few hundred
elements of fixed layout, which no charting library draws as the paper disc is drawn, and a
string per figure keeps the page fast (no JavaScript, nothing to fetch)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from html import escape

from collector.web.dayview import MINUTE_MS, DriverDay, VehicleDay
from collector.web.localtime import hhmm
from collector.web.tripview import TripView

#: The disc's speed scale: 0 km/h at R0, TOP_KMH at R1; a ring every RING_KMH.
R0, R1, TOP_KMH, RING_KMH = 130.0, 280.0, 140.0, 20.0
C = 320.0  # centre of the 640 × 640 disc
COLOURS = ("#1f5fbf", "#c0392b", "#2e8b57", "#8e44ad", "#d35400", "#16a085")
ACTIVITY_ROWS = (("drive", "direção", "#1f5fbf"), ("work", "trabalho", "#d35400"),
                 ("available", "disponibilidade", "#8e8e20"), ("rest", "descanso", "#2e8b57"))


def _xy(frac: float, r: float) -> tuple[float, float]:
    """The point at fraction ``frac`` of the day (0 at the top, clockwise) and radius ``r``."""
    a = 2 * math.pi * frac
    return C + r * math.sin(a), C - r * math.cos(a)


def _r_kmh(kmh: float) -> float:
    return R0 + (R1 - R0) * min(kmh, TOP_KMH) / TOP_KMH


def _pt(x: float, y: float) -> str:
    return f"{x:.1f},{y:.1f}"


def disc(d: VehicleDay) -> str:
    """The 24 h circular chart (the paper disc): speed trace, moving band, distance zig-zag,
    driver changes and compartment openings."""
    span = d.day.hi_ms - d.day.lo_ms
    hours = span / 3_600_000
    out = ['<svg class="disco" viewBox="0 0 640 640" role="img" xmlns="http://www.w3.org/2000/svg" '
           f'aria-label="Disco do dia {escape(d.vehicle)} {d.day.day:%d/%m/%Y}">',
           f'<circle cx="{C}" cy="{C}" r="318" fill="#fffdf5" stroke="#333"/>']
    for kmh in range(0, int(TOP_KMH) + 1, int(RING_KMH)):
        r = _r_kmh(kmh)
        out.append(f'<circle class="anel" cx="{C}" cy="{C}" r="{r:.1f}" fill="none" '
                   f'stroke="#bbb" stroke-width="{1.2 if kmh % 40 == 0 else 0.6}"/>')
        out.append(f'<text x="{C + 2:.0f}" y="{C - r + 10:.1f}" font-size="9" fill="#888">{kmh}</text>')
    for h in range(int(hours) + 1):
        frac = h / hours
        x1, y1 = _xy(frac, R1 + 2)
        x2, y2 = _xy(frac, 300 if h % 6 else 306)
        out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#333"/>')
        if h < hours:
            tx, ty = _xy(frac, 311)
            out.append(f'<text x="{tx:.1f}" y="{ty + 3:.1f}" font-size="10" text-anchor="middle">{h}</text>')
    out.append(_disc_speed(d, span))
    out.append(_disc_band(d, span))
    out.append(_disc_distance(d, span))
    for i, e in enumerate(d.driver_changes):
        frac = (e.ms - d.day.lo_ms) / span
        x1, y1 = _xy(frac, 40)
        x2, y2 = _xy(frac, R1)
        out.append(f'<line class="troca" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                   f'stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="1.5" stroke-dasharray="4 3">'
                   f'<title>{hhmm(e.ms, d.day.tz)} {escape(e.text)}</title></line>')
        lx, ly = _xy(frac, 34)
        out.append(f'<text x="{lx:.1f}" y="{ly + 3:.1f}" font-size="9" text-anchor="middle" '
                   f'fill="{COLOURS[i % len(COLOURS)]}">C{i + 1}</text>')
    for e in d.openings:
        x, y = _xy((e.ms - d.day.lo_ms) / span, R1 + 10)
        out.append(f'<path class="abertura" d="M{x:.1f},{y - 6:.1f} l5,9 h-10 z" fill="#c00">'
                   f'<title>{hhmm(e.ms, d.day.tz)} {escape(e.text)}</title></path>')
    if d.max_kmh is not None and d.max_at_ms is not None:
        x, y = _xy((d.max_at_ms - d.day.lo_ms) / span, _r_kmh(d.max_kmh))
        out.append(f'<circle class="maxima" cx="{x:.1f}" cy="{y:.1f}" r="4" fill="none" stroke="#c00">'
                   f'<title>velocidade máxima {d.max_kmh:.0f} km/h às {hhmm(d.max_at_ms, d.day.tz)}'
                   '</title></circle>')
    out.append(f'<text x="{C}" y="{C - 6}" font-size="14" text-anchor="middle" font-weight="bold">'
               f'{escape(d.vehicle)}</text>')
    out.append(f'<text x="{C}" y="{C + 12}" font-size="12" text-anchor="middle">{d.day.day:%d/%m/%Y}</text>')
    out.append("</svg>")
    return "".join(out)


def _runs(d: VehicleDay) -> list[list[int]]:
    """Runs of consecutive minutes that have samples."""
    runs: list[list[int]] = []
    for i, m in enumerate(d.minutes):
        if m is None:
            continue
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _disc_speed(d: VehicleDay, span: int) -> str:
    parts: list[str] = []
    for run in _runs(d):
        pts: list[str] = []
        for i in run:
            m = d.minutes[i]
            assert m is not None
            pts.append(_pt(*_xy((i + 0.25) * MINUTE_MS / span, _r_kmh(m[0]))))
            pts.append(_pt(*_xy((i + 0.75) * MINUTE_MS / span, _r_kmh(m[1]))))
        parts.append("M" + " L".join(pts))
    return (f'<path class="velocidade" d="{" ".join(parts)}" fill="none" stroke="#111" '
            'stroke-width="0.8"/>')


def _arc(a: float, b: float, r: float) -> str:
    x1, y1 = _xy(a, r)
    x2, y2 = _xy(b, r)
    large = 1 if b - a > 0.5 else 0
    return f"M{x1:.1f},{y1:.1f} A{r},{r} 0 {large} 1 {x2:.1f},{y2:.1f}"


def _disc_band(d: VehicleDay, span: int) -> str:
    """The time band: thick while moving, thin while stopped (with samples)."""
    thick: list[str] = []
    thin: list[str] = []
    i, n = 0, len(d.minutes)
    while i < n:
        m = d.minutes[i]
        if m is None:
            i += 1
            continue
        j = i
        while j + 1 < n and d.minutes[j + 1] is not None and d.minutes[j + 1][2] == m[2]:  # type: ignore[index]
            j += 1
        arc = _arc(i * MINUTE_MS / span, (j + 1) * MINUTE_MS / span, 112)
        (thick if m[2] else thin).append(arc)
        i = j + 1
    return (f'<path class="em-movimento" d="{" ".join(thick)}" fill="none" stroke="#111" stroke-width="9"/>'
            f'<path class="parado" d="{" ".join(thin)}" fill="none" stroke="#111" stroke-width="1.5"/>')


def _zig(km: float, step_km: float = 5.0) -> float:
    """0 → 1 → 0 every 2 × ``step_km``: the paper disc's distance stroke."""
    phase = (km / step_km) % 2
    return phase if phase <= 1 else 2 - phase


def _disc_distance(d: VehicleDay, span: int) -> str:
    if not d.distance:
        return ""
    pts = [_pt(*_xy((ms - d.day.lo_ms + MINUTE_MS / 2) / span, 62 + 30 * _zig(km)))
           for ms, km in d.distance]
    return (f'<path class="distancia" d="M{" L".join(pts)}" fill="none" stroke="#1f5fbf" '
            'stroke-width="0.8"><title>distância: um traço a cada 5 km</title></path>')


def timeline(d: VehicleDay, width: float = 960) -> str:
    """The same day as a linear chart: speed, moving band, driver changes, openings."""
    span = d.day.hi_ms - d.day.lo_ms
    left, top, h = 34.0, 10.0, 150.0

    def x(ms: float) -> float:
        return left + width * (ms - d.day.lo_ms) / span

    def y(kmh: float) -> float:
        return top + h - h * min(kmh, TOP_KMH) / TOP_KMH

    out = [f'<svg class="linha-do-tempo" viewBox="0 0 {left + width + 10:.0f} 215" '
           'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="Linha do tempo do dia">']
    for kmh in range(0, int(TOP_KMH) + 1, int(RING_KMH)):
        out.append(f'<line x1="{left}" x2="{left + width}" y1="{y(kmh):.1f}" y2="{y(kmh):.1f}" '
                   f'stroke="#ddd"/><text x="{left - 4}" y="{y(kmh) + 3:.1f}" font-size="9" '
                   f'text-anchor="end" fill="#666">{kmh}</text>')
    hours = span // 3_600_000
    for hr in range(0, hours + 1, 2):
        xx = x(d.day.lo_ms + hr * 3_600_000)
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{top}" y2="{top + h + 22}" stroke="#eee"/>'
                   f'<text x="{xx:.1f}" y="{top + h + 34}" font-size="10" text-anchor="middle">{hr:02d}h</text>')
    parts = []
    for run in _runs(d):
        pts = []
        for i in run:
            m = d.minutes[i]
            assert m is not None
            ms = d.day.lo_ms + i * MINUTE_MS
            pts.append(_pt(x(ms + MINUTE_MS * 0.25), y(m[0])))
            pts.append(_pt(x(ms + MINUTE_MS * 0.75), y(m[1])))
        parts.append("M" + " L".join(pts))
    out.append(f'<path d="{" ".join(parts)}" fill="none" stroke="#111" stroke-width="0.7"/>')
    band_y = top + h + 12
    step = width / len(d.minutes)
    # the moving/stopped band: one rectangle per run of minutes in the same state (a day is a
    # few dozen runs, not 1,440 rectangles)
    at = 0
    for moving, group in itertools.groupby(None if m is None else m[2] for m in d.minutes):
        count = sum(1 for _ in group)
        if moving is not None:
            hgt = 8 if moving else 2
            out.append(f'<rect x="{x(d.day.lo_ms + at * MINUTE_MS):.1f}" y="{band_y - hgt / 2:.1f}" '
                       f'width="{step * count + 0.2:.2f}" height="{hgt}" fill="#111"/>')
        at += count
    for i, e in enumerate(d.driver_changes):
        xx = x(e.ms)
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{top}" y2="{top + h}" '
                   f'stroke="{COLOURS[i % len(COLOURS)]}" stroke-dasharray="4 3"><title>'
                   f'{hhmm(e.ms, d.day.tz)} {escape(e.text)}</title></line>'
                   f'<text x="{xx + 2:.1f}" y="{top + 9}" font-size="9" '
                   f'fill="{COLOURS[i % len(COLOURS)]}">C{i + 1}</text>')
    for e in d.openings:
        xx = x(e.ms)
        out.append(f'<path d="M{xx:.1f},{top + h + 2:.1f} l5,9 h-10 z" fill="#c00"><title>'
                   f'{hhmm(e.ms, d.day.tz)} {escape(e.text)}</title></path>')
    out.append("</svg>")
    return "".join(out)


def jornada(dd: DriverDay, width: float = 960) -> str:
    """A driver's day: one row per activity (as the tachograph's chart), the vehicles above."""
    span = dd.day.hi_ms - dd.day.lo_ms
    left, row = 110.0, 26.0

    def x(ms: float) -> float:
        return left + width * (ms - dd.day.lo_ms) / span

    vehicles = dd.vehicles
    colour = {v: COLOURS[i % len(COLOURS)] for i, v in enumerate(vehicles)}
    height = 30 + row * len(ACTIVITY_ROWS) + 30
    out = [f'<svg class="jornada" viewBox="0 0 {left + width + 10:.0f} {height:.0f}" '
           'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="Jornada do dia">']
    for p in dd.pieces:
        if p.vehicle is not None:
            out.append(f'<rect class="veiculo" x="{x(p.start_ms):.1f}" y="4" '
                       f'width="{max(0.5, x(p.end_ms) - x(p.start_ms)):.1f}" height="10" '
                       f'fill="{colour[p.vehicle]}"><title>{escape(p.vehicle)}</title></rect>')
    for k, (act, word, fill) in enumerate(ACTIVITY_ROWS):
        yy = 26 + k * row
        out.append(f'<text x="{left - 6}" y="{yy + 15}" font-size="12" text-anchor="end">{word}</text>'
                   f'<line x1="{left}" x2="{left + width}" y1="{yy + row - 2}" y2="{yy + row - 2}" '
                   'stroke="#ddd"/>')
        for p in dd.pieces:
            if p.activity == act:
                out.append(f'<rect x="{x(p.start_ms):.1f}" y="{yy + 2}" '
                           f'width="{max(0.5, x(p.end_ms) - x(p.start_ms)):.1f}" height="{row - 6}" '
                           f'fill="{fill}"><title>{word} {hhmm(p.start_ms, dd.day.tz)}–'
                           f'{hhmm(p.end_ms, dd.day.tz)}</title></rect>')
    base = 26 + row * len(ACTIVITY_ROWS)
    for hr in range(0, span // 3_600_000 + 1, 2):
        xx = x(dd.day.lo_ms + hr * 3_600_000)
        out.append(f'<text x="{xx:.1f}" y="{base + 14}" font-size="10" text-anchor="middle">{hr:02d}h</text>')
    out.append("</svg>")
    return "".join(out)


def _fit(points: Sequence[tuple[float, float]], w: float, h: float,
         pad: float) -> tuple[float, float, float, float, float, float]:
    """(lat0, lon0, scale, cos, dx, dy) mapping degrees to the box, equal metres on both axes,
    centred: x = dx + (lon − lon0)·cos·scale, y = dy + (lat0 − lat)·scale."""
    lats = [p[0] for p in points]
    lons = [p[1] for p in points]
    cos = math.cos(math.radians((min(lats) + max(lats)) / 2))
    wide = max((max(lons) - min(lons)) * cos, 1e-6)
    tall = max(max(lats) - min(lats), 1e-6)
    scale = min((w - 2 * pad) / wide, (h - 2 * pad) / tall)
    return max(lats), min(lons), scale, cos, (w - wide * scale) / 2, (h - tall * scale) / 2


def route(t: TripView, w: float = 640, h: float = 420) -> str:
    """The route drawn from the positions, the line's points (with their radius) and the stops."""
    marks = [(lat, lon) for _, lat, lon in t.route]
    if t.line is not None:
        marks += [(p.lat, p.lon) for p in t.line.points]
    if not marks:
        return '<p class="vazio">Sem posições GPS nesta viagem.</p>'
    lat0, lon0, scale, cos, dx, dy = _fit(marks, w, h, 40)

    def xy(lat: float, lon: float) -> tuple[float, float]:
        return dx + (lon - lon0) * cos * scale, dy + (lat0 - lat) * scale

    out = [f'<svg class="rota" viewBox="0 0 {w:.0f} {h:.0f}" xmlns="http://www.w3.org/2000/svg" '
           'role="img" aria-label="Rota da viagem"><rect width="100%" height="100%" fill="#f6f8fa"/>']
    step = max(1, len(t.route) // 2000)
    pts = [_pt(*xy(lat, lon)) for _, lat, lon in t.route[::step]]
    if pts:
        out.append(f'<path d="M{" L".join(pts)}" fill="none" stroke="#1f5fbf" stroke-width="2"/>')
    if t.line is not None:
        for p in t.line.points:
            x, y = xy(p.lat, p.lon)
            r = max(3.0, p.radius_m / 111_320 * scale)
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="#2e8b5740" stroke="#2e8b57">'
                       f'<title>{escape(p.name)} ({p.kind})</title></circle>'
                       f'<text x="{x + (6 if x < w / 2 else -6):.1f}" y="{y - 8:.1f}" font-size="11" '
                       f'text-anchor="{"start" if x < w / 2 else "end"}">{escape(p.name)}</text>')
    for i, s in enumerate(t.stops):
        if s.lat is None or s.lon is None:
            continue
        x, y = xy(s.lat, s.lon)
        fill = "#2e8b57" if s.point else "#c0392b"
        out.append(f'<circle class="parada" cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{fill}">'
                   f'<title>parada {i + 1}: {s.minutes:.0f} min</title></circle>'
                   f'<text x="{x:.1f}" y="{y + 3.5:.1f}" font-size="9" fill="#fff" '
                   f'text-anchor="middle">{i + 1}</text>')
    out.append("</svg>")
    return "".join(out)


def on_board(t: TripView, capacity: int | None, w: float = 640, h: float = 180) -> str:
    """Passengers on board over the trip, as steps, with the capacity line."""
    span = max(1, t.end_ms - t.start_ms)
    top = max(t.peak_on_board, capacity or 0, 1)
    left, bottom = 34.0, h - 22

    def x(ms: int) -> float:
        return left + (w - left - 10) * (ms - t.start_ms) / span

    def y(n: float) -> float:
        return 10 + (bottom - 10) * (1 - n / top)

    out = [f'<svg class="a-bordo" viewBox="0 0 {w:.0f} {h:.0f}" xmlns="http://www.w3.org/2000/svg" '
           'role="img" aria-label="Passageiros a bordo">',
           f'<line x1="{left}" x2="{w - 10}" y1="{bottom}" y2="{bottom}" stroke="#999"/>',
           f'<text x="{left - 4}" y="{y(top) + 4:.1f}" font-size="10" text-anchor="end">{top}</text>',
           f'<text x="{left - 4}" y="{bottom:.1f}" font-size="10" text-anchor="end">0</text>']
    if capacity:
        out.append(f'<line x1="{left}" x2="{w - 10}" y1="{y(capacity):.1f}" y2="{y(capacity):.1f}" '
                   f'stroke="#c0392b" stroke-dasharray="5 3"><title>lotação {capacity}</title></line>')
    pts: list[str] = []
    for i, (ms, n) in enumerate(t.on_board):
        nxt = t.on_board[i + 1][0] if i + 1 < len(t.on_board) else t.end_ms
        pts += [_pt(x(ms), y(n)), _pt(x(nxt), y(n))]
    out.append(f'<path d="M{" L".join(pts)}" fill="none" stroke="#1f5fbf" stroke-width="2"/>')
    out.append(f'<text x="{left}" y="{h - 6}" font-size="10">{hhmm(t.start_ms, t.tz)}</text>'
               f'<text x="{w - 10}" y="{h - 6}" font-size="10" text-anchor="end">'
               f'{hhmm(t.end_ms, t.tz)}</text></svg>')
    return "".join(out)

