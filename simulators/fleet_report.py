"""What ``frota sim fleet`` measured, and how a simulated agent backs off its resends."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final

#: The longest wait before a batch is sent again, however many times it went unanswered.
MAX_BACKOFF_S: Final = 300.0


def resend_after(ack_timeout_s: float, attempt: int, rng: random.Random,
                 cap_s: float = MAX_BACKOFF_S) -> float:
    """Seconds to wait for an answer to the ``attempt``-th sending of a batch (1: the first):
    the ack timeout doubled at each attempt, capped at ``cap_s`` (never below the timeout), plus
    a random half of it at most — never sooner than the agent's own timeout, and spread, so
    that a fleet whose batches went unanswered together (a collector overloaded or gone) does
    not send them again together."""
    base = min(ack_timeout_s * 2.0 ** max(attempt - 1, 0), max(cap_s, ack_timeout_s))
    return base + rng.uniform(0.0, base / 2)


def percentile(values: list[float], p: float) -> float | None:
    """The ``p`` percentile (nearest rank) of ``values``, or None without any."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # ceil(n * p / 100), at least 1
    return ordered[int(rank) - 1]


PERCENTILES: Final = (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))
#: Where a record's latency to stored and evaluated went (:attr:`FleetReport.phases_ms`): the
#: wait for its bus's batch to be due, the simulator's lateness in sending it (a saturated
#: machine), from its sending to its acknowledgement's arrival (transport, ingest, commit), from
#: there to the start of the evaluation that judged it (its ``as_of``; negative when the
#: evaluation started before the simulator read the acknowledgement), and from that ``as_of``
#: to the notice's arrival (the evaluation itself and the notice's way).
PHASES: Final = ("batch_wait", "sim_late", "sent_to_stored", "stored_to_as_of",
                 "as_of_to_notice")


def phases(rows: Sequence[tuple[float, ...]]) -> dict[str, Any]:
    """Each phase's p50 and p99 over every record, and its mean over the slowest 1 % of the
    records to stored and evaluated (what their p99 is made of); rows are (total, *PHASES)."""
    if not rows:
        return {}
    tail = sorted(rows, key=lambda r: r[0])[int(len(rows) * 0.99):] or rows[-1:]
    return {name: {"p50": percentile([r[i] for r in rows], 50),
                   "p99": percentile([r[i] for r in rows], 99),
                   "slowest_1pct_mean": sum(r[i] for r in tail) / len(tail)}
            for i, name in enumerate(PHASES, start=1)}


@dataclass
class FleetReport:
    """What a run measured; ``unanswered`` counts records created and never answered,
    ``unevaluated`` records stored and never announced as evaluated (protocols/evaluated.py)."""

    vehicles: int
    duration_s: float
    created: int = 0
    stored: int = 0
    rejected: int = 0
    conflicts: int = 0
    batches: int = 0
    resent_batches: int = 0
    unanswered: int = 0
    evaluated: int = 0
    unevaluated: int = 0
    notices: int = 0
    #: Creation → the acknowledgement that the record was stored, milliseconds.
    latencies_ms: list[float] = field(default_factory=list)
    #: Creation → the evaluation notice naming the record (stored and evaluated), milliseconds.
    evaluated_ms: list[float] = field(default_factory=list)
    #: Per record evaluated: (creation → notice, *PHASES), milliseconds (the notice's ``as_of``
    #: is the collector's clock: the simulator and the collector on one machine, or synced).
    phases_ms: list[tuple[float, float, float, float, float, float]] = field(default_factory=list)
    #: Per evaluation notice read: (its as_of, ms from that as_of to its arrival).
    notice_lag_ms: list[tuple[int, float]] = field(default_factory=list)

    def percentile(self, p: float) -> float | None:
        """The ``p`` percentile (nearest rank) of the stored latencies, or None without any."""
        return percentile(self.latencies_ms, p)

    def merge(self, other: FleetReport) -> None:
        """Add another worker's report (its vehicles, counts and latencies) to this one."""
        for f in fields(self):
            if f.name == "duration_s":
                continue
            mine = getattr(self, f.name)
            setattr(self, f.name, mine + getattr(other, f.name))

    def summary(self) -> dict[str, Any]:
        """The report as a JSON object (latencies in milliseconds)."""
        return {
            "vehicles": self.vehicles, "duration_s": self.duration_s, "created": self.created,
            "stored": self.stored, "rejected": self.rejected, "conflicts": self.conflicts,
            "unanswered": self.unanswered, "batches": self.batches,
            "resent_batches": self.resent_batches, "evaluated": self.evaluated,
            "unevaluated": self.unevaluated, "notices": self.notices,
            "latency_ms": {name: percentile(self.latencies_ms, p) for name, p in PERCENTILES},
            "evaluated_ms": {name: percentile(self.evaluated_ms, p) for name, p in PERCENTILES},
            "phases_ms": phases(self.phases_ms),
            "notice_lag_ms": sorted(self.notice_lag_ms),
        }
