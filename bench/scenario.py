"""Scenario rendering speed: a whole trip to canonical records, against the cost of the records alone.

    python -m bench.scenario [--scenario ba-night] [--repeat 3]

Three timings of the same scenario in the same run (best of ``--repeat``):

- ``timeline``: the kinematics and events worked out second by second (:func:`build`);
- ``render``: timeline plus every record (:func:`render`), what ``frota check`` tests use;
- ``render+validate+json``: what ``frota sim scenario render`` does per record;
- ``floor``: building the same number of plain dicts with the same timestamps (``ms_to_ts``),
  the least any renderer producing these records must spend.

Printed: wall seconds, records/s, scenario seconds per wall second (× real time) and the ratio
of render to the floor.
"""

from __future__ import annotations

import argparse

from bench.common import best_run
from protocols.records import dumps, ms_to_ts, validate
from simulators.scenario import find, load
from simulators.scenario.render import iter_records
from simulators.scenario.timeline import build


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="ba-night", help="a shipped name or a file")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sc = load(find(args.scenario))
    tl = build(sc)
    seconds = tl.duration_s + 1
    n_records = sum(1 for _ in iter_records(tl))

    def floor() -> int:
        out = []
        for t in range(n_records // 2):
            ts = ms_to_ts(sc.start_ms + t * 1000)
            out.append({"vehicle": sc.vehicle, "ts": ts, "kind": "speed", "kmh": 1.0})
            out.append({"vehicle": sc.vehicle, "ts": ts, "kind": "position", "lat": 1.0})
        return len(out)

    def timeline() -> int:
        return build(sc).duration_s + 1

    def render() -> int:
        return sum(1 for _ in iter_records(build(sc)))

    def full() -> int:
        return sum(len(dumps(validate(r))) > 0 for r in iter_records(build(sc)))

    results = {name: best_run(job, args.repeat) for name, job in
               (("floor", floor), ("timeline", timeline), ("render", render),
                ("render+validate+json", full))}
    base = results["floor"][0]
    print(f"{sc.name}: {seconds} s of trip ({seconds / 3600:.1f} h), {n_records} records")
    print(f"{'':<22} {'wall s':>8} {'records/s':>11} {'× real time':>12} {'÷ floor':>8}")
    for name, (wall, _) in results.items():
        per_s = n_records / wall if name != "timeline" else float("nan")
        print(f"{name:<22} {wall:8.3f} {per_s:11,.0f} {seconds / wall:12,.0f} {wall / base:8.2f}")


if __name__ == "__main__":
    main()
