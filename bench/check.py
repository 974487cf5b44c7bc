"""``frota check`` throughput against a floor that only reads and parses the same JSON Lines.

    python -m bench.check [--buses 20] [--hours 168] [--keep FILE | --reuse FILE] [--repeat 3]

Generates a fleet of buses at 1 Hz (a speed and a position record per bus per second, agent and
``seq`` on each, in time order), 24 hours a day: two trips a day per bus on its own line with two
speed zones, two drivers a day, stops at points, a break, a speeding episode every two hours.
The default is the issue's week of a 20-bus fleet: about 24 million records (~3 GB of JSON Lines,
streamed to a temporary file). Then, in the same run:

- the floor: read the file line by line and ``json.loads`` each line (standard library);
- ``frota check`` on the file (a real process, findings to /dev/null);

both on the records in time order and on the same records out of order (shuffled in windows,
the windows in a shuffled order), ``--repeat`` interleaved rounds (at least 3).

Printed: the median and spread of records/s of each and the ratio of their times. Targets (issue 6): at least 100,000
records/s and at most 3× the floor's time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Figure, add_repeat, host_line, target

T0_MS = 1_772_420_400_000  # 2026-03-02T03:00:00.000Z = 00:00 in São Paulo
DAY_S = 86_400
LOCAL = -3 * 3600  # São Paulo, no DST in 2026
WINDOW = 100_000  # lines shuffled together in the unordered input
NOISE = [((i * 7919) % 61 - 30) / 10 for i in range(997)]  # deterministic ±3 km/h


def _ts(second: int) -> str:
    t = time.gmtime(T0_MS // 1000 + second)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.000Z"


def registry(buses: int) -> dict[str, object]:
    """One line per bus (SP, 90 km/h, two 60 km/h zones), the buses, two drivers per bus."""
    lines = []
    for b in range(buses):
        lat0, lon0 = -23.0 - b * 0.01, -46.0
        lines.append({
            "id": f"L{b:02d}", "profile": "SP", "service": "rodoviario", "length_km": 400,
            "speed_limit_kmh": 90,
            "speed_zones": [
                {"limit_kmh": 60, "lat": lat0 + 0.02, "lon": lon0, "radius_m": 800},
                {"limit_kmh": 60, "lat": lat0 + 0.06, "lon": lon0, "radius_m": 800},
            ],
        })
    return {
        "lines": lines,
        "vehicles": [{"id": f"BUS{b:02d}", "seats": 46, "capacity": 46} for b in range(buses)],
        "drivers": [{"id": f"D{b:02d}{s}", "name": f"Driver {b}{s}", "card": f"C{b:02d}{s}"}
                    for b in range(buses) for s in "AB"],
    }


def _speed(local_s: int, bus: int) -> float:
    """km/h at a local second of the day: trips 06–11 h and 12–17 h, a stop each 50 min."""
    in_day = local_s % DAY_S
    shift = (in_day - 6 * 3600) if 6 * 3600 <= in_day < 11 * 3600 else \
        (in_day - 12 * 3600) if 12 * 3600 <= in_day < 17 * 3600 else -1
    if shift < 0:
        return 0.0
    cycle = shift % 3000
    if cycle >= 2700 or (9000 <= shift < 10800):  # a 5-min stop every 50 min; a 30-min break
        return 0.0
    if shift % 7200 < 30:  # a speeding episode every two hours
        return 98.0 + NOISE[shift % 997]
    return 78.0 + NOISE[(shift + bus * 37) % 997]


def _events(local_s: int, bus: int, vehicle: str, ts: str) -> list[str]:
    """Driver and trip records at their times of day (local)."""
    in_day = local_s % DAY_S
    day = local_s // DAY_S
    out: list[str] = []

    def driver(card: str | None, activity: str) -> None:
        card_json = "null" if card is None else f'"{card}"'
        out.append(f'{{"vehicle":"{vehicle}","ts":"{ts}","kind":"driver","slot":1,'
                   f'"driver":{card_json},"activity":"{activity}"}}')

    def trip(event: str, n: int) -> None:
        out.append(f'{{"vehicle":"{vehicle}","ts":"{ts}","kind":"trip","event":"{event}",'
                   f'"trip":"T{bus:02d}-{day}-{n}","line":"L{bus:02d}"}}')

    for n, (start, card) in enumerate(((6 * 3600, "A"), (12 * 3600, "B"))):
        if in_day == start - 600:
            driver(f"C{bus:02d}{card}", "work")
            trip("start", n)
        elif in_day == start:
            driver(f"C{bus:02d}{card}", "drive")
        elif in_day == start + 9000:
            driver(f"C{bus:02d}{card}", "rest")
        elif in_day == start + 10800:
            driver(f"C{bus:02d}{card}", "drive")
        elif in_day == start + 5 * 3600:
            trip("end", n)
            driver(None, "unknown")
    return out


def generate(path: Path, buses: int, hours: int) -> int:
    """Write the fleet's records in time order; return how many."""
    count = 0
    seq = [0] * buses
    odometer = [100_000_000 + b * 1_000_000 for b in range(buses)]
    with path.open("w", buffering=1 << 20) as out:
        for second in range(hours * 3600):
            ts = _ts(second)
            local_s = second + (T0_MS // 1000 + LOCAL) % DAY_S
            chunk: list[str] = []
            for b in range(buses):
                vehicle = f"BUS{b:02d}"
                agent = f"pi-{vehicle}"
                kmh = _speed(local_s, b)
                odometer[b] += int(kmh / 3.6)
                progress = (local_s % 18000) * 0.00002
                lines = _events(local_s, b, vehicle, ts)
                lines.append(f'{{"vehicle":"{vehicle}","ts":"{ts}","kind":"speed","kmh":{kmh:.1f},'
                             f'"odometer_m":{odometer[b]},"ignition":true')
                lines.append(f'{{"vehicle":"{vehicle}","ts":"{ts}","kind":"position",'
                             f'"lat":{-23.0 - b * 0.01 + progress:.5f},"lon":-46.00000,'
                             f'"kmh":{kmh:.1f}')
                for line in lines:
                    seq[b] += 1
                    body = line.removesuffix("}")
                    chunk.append(f'{body},"agent":"{agent}","seq":{seq[b]}}}\n')
            count += len(chunk)
            out.write("".join(chunk))
    return count


def floor(path: Path) -> tuple[float, float]:
    """Seconds (wall, CPU) to read the file and ``json.loads`` every line."""
    start, cpu = time.perf_counter(), time.process_time()
    loads = json.loads
    with path.open("rb") as handle:
        for line in handle:
            loads(line)
    return time.perf_counter() - start, time.process_time() - cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def frota_check(path: Path, registry_path: Path) -> tuple[float, float, int]:
    """Seconds (wall, CPU) for ``frota check`` on the file, and the number of findings."""
    start, cpu = time.perf_counter(), _children_cpu()
    result = subprocess.run(
        [sys.executable, "-m", "frota", "check", "--registry", str(registry_path), str(path)],
        capture_output=True, check=False,
    )
    elapsed, used = time.perf_counter() - start, _children_cpu() - cpu
    if result.returncode != 0:
        raise SystemExit(f"frota check failed: {result.stderr.decode()[:500]}")
    return elapsed, used, result.stdout.count(b"\n")


def unordered_copy(path: Path, out: Path, window: int = WINDOW, seed: int = 1) -> None:
    """The same lines out of order, as a collector receives backlogs: windows of ``window``
    lines written in a shuffled order, each window shuffled (streamed: one window in memory)."""
    rng = random.Random(seed)
    starts: list[int] = []
    with path.open("rb") as handle:
        n = 0
        while True:
            if n % window == 0:
                starts.append(handle.tell())
            if not handle.readline():
                break
            n += 1
    rng.shuffle(starts)
    with path.open("rb") as src, out.open("wb", buffering=1 << 20) as dst:
        for start in starts:
            src.seek(start)
            lines = [line for line in (src.readline() for _ in range(window)) if line]
            rng.shuffle(lines)
            dst.writelines(lines)


def main() -> None:
    """Generate (or reuse) the records, time the floor and frota check, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buses", type=int, default=20)
    parser.add_argument("--hours", type=int, default=7 * 24, help="default: a week")
    parser.add_argument("--keep", metavar="FILE", help="write the records here and keep them")
    parser.add_argument("--reuse", metavar="FILE", help="time an existing file from --keep")
    add_repeat(parser)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="frota-bench-check-"))
    registry_path = workdir / "registry.json"
    registry_path.write_text(json.dumps(registry(args.buses)))
    if args.reuse:
        path = Path(args.reuse)
        with path.open("rb") as handle:
            count = sum(1 for _ in handle)
        print(f"reusing {path}: {count:,} records")
    else:
        path = Path(args.keep) if args.keep else workdir / "records.jsonl"
        started = time.perf_counter()
        count = generate(path, args.buses, args.hours)
        print(f"generated {count:,} records ({args.buses} buses × {args.hours} h at 1 Hz, "
              f"{path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - started:.0f} s")
    shuffled = workdir / "unordered.jsonl"
    try:
        unordered_copy(path, shuffled)
        inputs = {"in time order": path, "unordered": shuffled}
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        found: dict[str, int] = {}
        for _ in range(args.repeat):  # every case once per round: interleaved
            for label, file in inputs.items():
                base, base_cpu = floor(file)
                took, took_cpu, found[label] = frota_check(file, registry_path)
                for key, w, c in ((f"floor {label}", base, base_cpu),
                                  (f"check {label}", took, took_cpu)):
                    wall.setdefault(key, []).append(w)
                    cpu.setdefault(key, []).append(c)
        print(f"{args.repeat} interleaved rounds, median (spread); the unordered input is the "
              f"same records shuffled (windows of {WINDOW:,} lines in a shuffled order, each "
              "shuffled)")
        for label in inputs:
            base_w, base_c = Figure(tuple(wall[f"floor {label}"])), Figure(tuple(cpu[f"floor {label}"]))
            took_w, took_c = Figure(tuple(wall[f"check {label}"])), Figure(tuple(cpu[f"check {label}"]))
            print(f"{label}:")
            print(f"  floor (read + json.loads): {base_w.show('{:.1f}')} s  "
                  f"{base_w.per(count).show()} records/s (CPU {base_c.show('{:.1f}')} s)")
            print(f"  frota check:               {took_w.show('{:.1f}')} s  "
                  f"{took_w.per(count).show()} records/s (CPU {took_c.show('{:.1f}')} s; "
                  f"{found[label]:,} findings)")
            wall_x, cpu_x = took_w.ratio(base_w), took_c.ratio(base_c)
            print(f"  ratio to the floor: {wall_x.show('{:.2f}')}x wall, {cpu_x.show('{:.2f}')}x "
                  f"CPU (target <= 3x: {target(wall_x.median <= 3)} wall, "
                  f"{target(cpu_x.median <= 3)} CPU); throughput target >= 100,000 records/s: "
                  f"{target(took_w.per(count).median >= 100_000)} (wall), "
                  f"{target(took_c.per(count).median >= 100_000)} (CPU)")
        if found["in time order"] != found["unordered"]:
            print(f"NOTE: {found['in time order']} findings in time order, "
                  f"{found['unordered']} unordered")
        print(host_line())
    finally:
        shuffled.unlink(missing_ok=True)
        if not args.keep and not args.reuse:
            path.unlink(missing_ok=True)
        registry_path.unlink(missing_ok=True)
        os.rmdir(workdir)


if __name__ == "__main__":
    main()
