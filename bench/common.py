"""What the benchmarks share: timing a run, best of several."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_seconds(run: Callable[[], object], repeat: int) -> float:
    """The fastest of ``repeat`` runs, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def best_run(run: Callable[[], int], repeat: int) -> tuple[float, int]:
    """The fastest of ``repeat`` runs in seconds, and what the last run returned (0 if none)."""
    result = 0

    def once() -> None:
        nonlocal result
        result = run()

    return best_seconds(once, repeat), result
