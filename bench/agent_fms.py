"""Agent load with the tachograph on FMS: CPU of ``frota agent run`` per hour of a bus whose
tachograph is read on the FMS CAN bus, beside the same bus with the registrador.

    .venv/bin/python -m bench.agent_fms [--scale 20] [--hours 0.25] [--realtime 20] [--repeat 3]

The bus of ``bench.agent_load`` (GPS at 1 Hz, four door counters polled each device second,
private Mosquitto and collector) with its tachograph played two ways, in interleaved rounds:
``frota sim registrador`` (1 status frame per second), and ``frota sim fms`` (an SLCAN adapter on
a pty: TCO1 at the FMS standard's 20 Hz, TD, VDHR and DC2 every second, DI every 10 s — about 23
CAN frames per second, 27 characters each) read by the agent's FMS source with python-can,
listen-only. Measured from /proc: the agent's CPU per simulated hour (a share of one core;
target <= 1 %), and the ratio FMS ÷ registrador measured in the same round (the baseline).
``--realtime N`` also plays both at 1× for N seconds (the share directly, per-second costs
uncompressed). Median and spread of ``--repeat`` rounds (at least 3).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.agent_load import run_bus
from bench.common import Figure, add_repeat, host_line, target
from frota.harness import Mosquitto


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=20.0, help="time scale (default 20)")
    parser.add_argument("--hours", type=float, default=0.25,
                        help="device hours per scaled run (default 0.25)")
    parser.add_argument("--realtime", type=float, default=20.0,
                        help="seconds of each bus at 1× (default 20; 0 = skip)")
    add_repeat(parser)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"registrador": [], "fms": []}
    real: dict[str, list[dict[str, float]]] = {"registrador": [], "fms": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        broker = Mosquitto(folder)
        broker.start()
        try:
            for n in range(args.repeat):  # interleaved: registrador, fms, registrador, fms, …
                for tachograph in ("registrador", "fms"):
                    runs[tachograph].append(run_bus(
                        folder / f"{tachograph}{n}", broker, args.scale,
                        args.hours * 3600 / args.scale, tachograph))
                    if args.realtime > 0:
                        real[tachograph].append(run_bus(
                            folder / f"{tachograph}{n}-1x", broker, 1.0, args.realtime, tachograph))
        finally:
            broker.stop()

    def share(rows: list[dict[str, float]]) -> Figure:  # CPU s per device s
        return Figure(tuple(r["cpu"] / r["device_s"] for r in rows))

    print(f"one bus, {args.hours:g} h per run at {args.scale:g}×, {args.repeat} interleaved rounds, "
          "median (spread)")
    for tachograph in ("registrador", "fms"):
        fig = share(runs[tachograph])
        print(f"  tachograph on {tachograph:<11}: agent CPU {fig.scaled(3600).show('{:.1f}')} s per "
              f"simulated hour = {fig.scaled(100).show('{:.2f}')} % of one core   "
              f"(target <= 1 %: {target(fig.median <= 0.01)})")
    ratio = Figure(tuple(f["cpu"] / f["device_s"] / (r["cpu"] / r["device_s"])
                         for f, r in zip(runs["fms"], runs["registrador"], strict=True)))
    print(f"  FMS ÷ registrador, same round: {ratio.show('{:.2f}')}×")
    if real["fms"]:
        for tachograph in ("registrador", "fms"):
            fig = Figure(tuple(r["cpu"] / r["wall"] for r in real[tachograph])).scaled(100)
            print(f"  at 1× for {args.realtime:g} s, {tachograph:<11}: agent CPU "
                  f"{fig.show('{:.2f}')} % of one core   (target <= 1 %: {target(fig.median <= 1)})")
    print(host_line())


if __name__ == "__main__":
    main()
