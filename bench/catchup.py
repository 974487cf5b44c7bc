"""Catch-up rate on a noisy registrador line: how fast the agent downloads a backlog the
registrador holds, at bit-error rates 0 (the baseline), 1e-4 and 1e-3 (issue 11 item 4).

    .venv/bin/python -m bench.catchup [--frames 2000] [--repeats 3]

Each run: ``frota sim registrador --idle --history N`` (N frames already in its memory, live
frames at 1 Hz, ``--ber`` on everything it sends: live frames, history records and ends) and
``frota agent run`` on a new buffer, real processes on a pty. Timed from the agent's start until
its buffer holds every one of frames 1…N (read from the buffer, which skips a frame it holds).
Runs are interleaved (0, 1e-4, 1e-3, then again) so machine load falls on all alike; printed:
the median and the spread (min–max) of the frames per second, the ratio to the baseline's
median, and the frames never captured (the target: none).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.services import PROJECT, stop_process

BERS = (0.0, 1e-4, 1e-3)
#: Give up on one run after this long (seconds); its missing frames are reported.
RUN_LIMIT_S = 600.0


def agent_config(folder: Path, link: Path) -> Path:
    """An agent with the registrador only; no broker answers (the buffer is what is timed)."""
    path = folder / "agent.toml"
    path.write_text(
        'vehicle = "BENCH01"\n[buffer]\npath = "buffer.sqlite"\n'
        '[broker]\nurl = "mqtt://127.0.0.1:1"\n'
        f'[[devices]]\nname = "registrador"\nprotocol = "registrador"\nport = "{link}"\n',
        encoding="utf-8",
    )
    return path


def captured(buffer: Path, frames: int) -> int:
    """How many of frames 1…``frames`` the buffer holds."""
    if not buffer.exists():
        return 0
    conn = sqlite3.connect(f"file:{buffer}?mode=ro", uri=True, timeout=10)
    try:
        (n,) = conn.execute(
            "SELECT COUNT(DISTINCT device_seq) FROM records WHERE source = 'registrador' "
            "AND device_seq BETWEEN 1 AND ?", (frames,)).fetchone()
        return int(n)
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def one_run(ber: float, frames: int, seed: int) -> tuple[float, int]:
    """(seconds to capture frames 1…N, frames never captured) for one run."""
    with tempfile.TemporaryDirectory(prefix="frota-catchup-") as tmp:
        folder = Path(tmp)
        link = folder / "registrador"
        sim = subprocess.Popen(
            [sys.executable, "-m", "frota", "sim", "registrador", "--idle", "--link", str(link),
             "--history", str(frames), "--ber", str(ber), "--seed", str(seed)],
            cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        agent: subprocess.Popen[bytes] | None = None
        try:
            while not link.exists():
                if sim.poll() is not None:
                    raise SystemExit("the registrador simulator did not start")
                time.sleep(0.05)
            config = agent_config(folder, link)
            with (folder / "agent.log").open("wb") as log:
                start = time.monotonic()
                agent = subprocess.Popen(
                    [sys.executable, "-m", "frota", "agent", "run", "--config", str(config)],
                    cwd=PROJECT, stdout=log, stderr=subprocess.STDOUT)
            buffer = folder / "buffer.sqlite"
            while (got := captured(buffer, frames)) < frames:
                if time.monotonic() - start > RUN_LIMIT_S or agent.poll() is not None:
                    return time.monotonic() - start, frames - got
                time.sleep(0.1)
            return time.monotonic() - start, 0
        finally:
            if agent is not None:
                stop_process(agent, 15, 30)
            stop_process(sim, 15, 30)


def main() -> None:
    """Run the interleaved repeats and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2000, help="backlog in frames (2000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per bit-error rate (3)")
    args = parser.parse_args()
    rates: dict[float, list[float]] = {ber: [] for ber in BERS}
    lost: dict[float, int] = dict.fromkeys(BERS, 0)
    for repeat in range(args.repeats):
        for i, ber in enumerate(BERS):
            seconds, missing = one_run(ber, args.frames, seed=100 * repeat + i)
            rates[ber].append(args.frames / seconds)
            lost[ber] += missing
            print(f"  run {repeat + 1} BER {ber:g}: {seconds:.1f} s, "
                  f"{args.frames / seconds:.0f} frames/s, {missing} never captured", flush=True)
    base = statistics.median(rates[0.0])
    print(f"\ncatch-up of {args.frames} frames at 115200 baud, {args.repeats} interleaved runs "
          "each (median, spread min-max):")
    for ber in BERS:
        median = statistics.median(rates[ber])
        print(f"  BER {ber:<6g} {median:6.0f} frames/s  ({min(rates[ber]):.0f}-"
              f"{max(rates[ber]):.0f})  {median / base:4.2f}x the clean line  "
              f"never captured: {lost[ber]}  (target: 0)")


if __name__ == "__main__":
    main()
