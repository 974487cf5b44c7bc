"""What the benchmarks share: interleaved repeats reported as median and spread, and the process
harness's collector (``frota.harness``; benchmarks never import from ``tests/``)."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from frota.harness import CollectorProcess, write_collector_files

if TYPE_CHECKING:
    from collector.store import Store
    from collector.verifier import ChainVerifier

#: The fewest repeats a benchmark may print a figure from.
MIN_REPEAT: Final = 3


@dataclass(frozen=True)
class Figure:
    """One measured quantity over several repeats: its median and its spread (lowest, highest).

    Never the best run: on a shared machine the best run is luck; the median and the spread say
    what to expect and how much to trust it.
    """

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median of the repeats."""
        return statistics.median(self.samples)

    @property
    def low(self) -> float:
        """The lowest repeat."""
        return min(self.samples)

    @property
    def high(self) -> float:
        """The highest repeat."""
        return max(self.samples)

    def show(self, fmt: str = "{:,.0f}") -> str:
        """``median (low-high, n=N)`` with ``fmt`` for each number."""
        return (f"{fmt.format(self.median)} ({fmt.format(self.low)}-{fmt.format(self.high)}, "
                f"n={len(self.samples)})")

    def per(self, count: float) -> Figure:
        """``count`` divided by each sample (seconds → a rate)."""
        return Figure(tuple(count / s for s in self.samples))

    def scaled(self, factor: float) -> Figure:
        """Each sample multiplied by ``factor``."""
        return Figure(tuple(s * factor for s in self.samples))

    def ratio(self, base: Figure) -> Figure:
        """Round by round, this over ``base`` (the repeats are paired: interleaved runs)."""
        return Figure(tuple(a / b for a, b in zip(self.samples, base.samples, strict=True)))


def repeats(value: str) -> int:
    """argparse type for ``--repeat``: at least :data:`MIN_REPEAT`."""
    n = int(value)
    if n < MIN_REPEAT:
        raise argparse.ArgumentTypeError(f"at least {MIN_REPEAT} repeats (the median and spread "
                                         "of fewer say nothing)")
    return n


def add_repeat(parser: argparse.ArgumentParser, default: int = MIN_REPEAT) -> None:
    """The ``--repeat`` option every benchmark has."""
    parser.add_argument("--repeat", type=repeats, default=default, metavar="N",
                        help=f"interleaved repeats of every case, median and spread printed "
                        f"(default {default}, at least {MIN_REPEAT})")


def timed(run: Callable[[], object]) -> tuple[float, object]:
    """Seconds ``run()`` took, and what it returned."""
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def interleaved(
    runs: Mapping[str, Callable[[], object]], repeat: int
) -> tuple[dict[str, Figure], dict[str, object]]:
    """Each run ``repeat`` times, one of each per round (so a slow moment of the machine hits
    every case alike): seconds per case, and what each case's last run returned."""
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    results: dict[str, object] = {}
    for _ in range(repeat):
        for name, run in runs.items():
            took, results[name] = timed(run)
            seconds[name].append(took)
    return {name: Figure(tuple(s)) for name, s in seconds.items()}, results


def target(met: bool) -> str:
    """"met" or "NOT met", beside a target."""
    return "met" if met else "NOT met"


def host_line() -> str:
    """The machine's state, printed under every benchmark's figures."""
    return f"(host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f})"


def cpu_of(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of_tree(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of a process and of each of its living descendants (a
    collector's batch readers: children of its forkserver), by pid; a process that ends while
    it is read is left out."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    out: dict[int, float] = {}
    for member in tree:
        try:
            out[member] = cpu_of(member)
        except (OSError, ValueError, IndexError):
            continue
    return out


def collector_in(folder: Path, broker_url: str, vehicles: Sequence[str]) -> tuple[CollectorProcess, Path]:
    """A collector (the process harness's) in ``folder`` for a fleet of ``vehicles``, and its
    SQLite database; not started."""
    fleet = {
        "lines": [],
        "vehicles": [{"id": v, "seats": 46, "capacity": 46} for v in vehicles],
        "drivers": [],
    }
    config, port = write_collector_files(folder, broker_url, fleet, client_id="bench-collector")
    return CollectorProcess(config, port), folder / "collector.db"


def verified_seq(store: Store, verifier: ChainVerifier, vehicle: str, agent: str) -> int:
    """Run the verifier's passes until it has nothing left to do (each pass walks at most
    ``verifier.PAGE`` links per agent): every link walked, every checkpoint checked. The seq up
    to which the chain of (vehicle, agent) is verified."""
    def verified() -> int:
        rows = store._read("SELECT seq FROM chain_state WHERE vehicle = ? AND agent = ?",
                           (vehicle, agent))
        return int(rows[0][0]) if rows else 0

    seq = -1
    while True:
        verifier.run_once()
        pending = store._read("SELECT count(*) FROM checkpoints WHERE state = 'new'")[0][0]
        if not pending and verified() == seq:
            return seq
        seq = verified()
