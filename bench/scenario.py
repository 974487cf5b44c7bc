"""Scenario rendering speed: a whole trip to canonical records, against the cost of the records alone.

    python -m bench.scenario [--scenario ba-night] [--repeat 3]

Timings of the same scenario in the same run (median and spread of ``--repeat`` interleaved
repeats):

- ``timeline``: the kinematics and events worked out second by second (:func:`build`);
- ``render``: timeline plus every record (:func:`render`), what ``frota check`` tests use;
- ``render+validate+json``: what ``frota sim scenario render`` does per record;
- ``floor``: building the same number of plain dicts with the same timestamps (``ms_to_ts``),
  the least any renderer producing these records must spend.

Printed: wall seconds, records/s, scenario seconds per wall second (× real time) and the ratio
to the floor, round by round.
"""

from __future__ import annotations

import argparse

from bench.common import add_repeat, host_line, interleaved
from protocols.records import dumps, ms_to_ts, validate
from simulators.scenario import find, load
from simulators.scenario.render import iter_records
from simulators.scenario.timeline import build


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="ba-night", help="a shipped name or a file")
    add_repeat(parser)
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

    walls, _ = interleaved({"floor": floor, "timeline": timeline, "render": render,
                            "render+validate+json": full}, args.repeat)
    base = walls["floor"]
    print(f"{sc.name}: {seconds} s of trip ({seconds / 3600:.1f} h), {n_records} records; "
          f"{args.repeat} interleaved repeats, median (spread); no target set by an issue")
    for name, wall in walls.items():
        rate = "" if name == "timeline" else f"; {wall.per(n_records).show()} records/s"
        print(f"  {name:<22} {wall.show('{:.3f}')} s{rate}; "
              f"{wall.per(seconds).median:,.0f}x real time; {wall.ratio(base).show('{:.2f}')}x floor")
    print(host_line())


if __name__ == "__main__":
    main()
