"""The batches the uplink sent and the collector has not answered yet, and when to send them again.

A batch is *in flight* until the collector's ack names every record of it (stored, rejected or
in conflict). One not answered within its wait is sent again (the collector stores each record
once, so a resend is harmless) — but not at a steady pace: an overloaded collector that is slow
to answer would get every batch again every ``ack_timeout_s`` on top of its backlog and never
recover. So the wait is a capped exponential backoff with jitter (:class:`ResendBackoff`): the
first wait is ``ack_timeout_s``; each round of resends that goes unanswered doubles the next
wait (a batch sent for the n-th time unanswered: 2^n × ``ack_timeout_s``), up to
``resend_max_s``, each wait drawn between half and all of it (so a fleet of buses that lost the
same collector does not resend in step). New batches wait as long as the resends. Any ack from
the collector starts over at ``ack_timeout_s``, and so does a new connection to the broker.
"""

from __future__ import annotations

import bisect
import random
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Flight:
    """A batch sent and not yet answered by the collector."""

    seqs: set[int]
    sent_at: float
    lane: str  # "live", "backlog" or "resend"
    #: When it is sent again if still unanswered (monotonic seconds).
    due: float
    #: How many times these records went unanswered before (0: first send).
    attempt: int = 0


def covered(ranges: list[tuple[int, int]]) -> Callable[[int], bool]:
    """A membership test for a list of inclusive seq ranges."""
    ordered = sorted(ranges)
    starts = [a for a, _ in ordered]

    def test(seq: int) -> bool:
        i = bisect.bisect_right(starts, seq) - 1
        return i >= 0 and ordered[i][0] <= seq <= ordered[i][1]

    return test


class ResendBackoff:
    """How long to wait for an answer: ``first_s``, doubled per round of misses up to ``max_s``,
    each wait after a miss drawn uniformly in [half, all] of it; :meth:`reset` on an answer."""

    def __init__(self, first_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self.first_s = first_s
        self.max_s = max(first_s, max_s)
        self.misses = 0
        self._rng = rng or random.Random()

    def ceiling(self) -> float:
        """The current wait before jitter: ``first_s`` × 2^misses, at most ``max_s``."""
        # min() first: 2.0 ** misses overflows a float past ~1024 misses.
        return min(self.max_s, self.first_s * 2.0 ** min(self.misses, 64))

    def wait(self) -> float:
        """The wait for the next batch sent: ``first_s`` with no miss, else jittered."""
        if self.misses == 0:
            return self.first_s
        ceiling = self.ceiling()
        return self._rng.uniform(ceiling / 2, ceiling)

    def missed(self, attempt: int) -> None:
        """A batch sent for the ``attempt``-th time (0: the first) went unanswered: wait longer.
        Several batches of one round of sends count once (their attempt is the same)."""
        self.misses = max(self.misses, attempt + 1)

    def reset(self) -> None:
        """The collector answered: back to ``first_s``."""
        self.misses = 0


class Flights:
    """The batches in flight, keyed by a number given at send."""

    def __init__(self, backoff: ResendBackoff) -> None:
        self.backoff = backoff
        self.batches: dict[int, Flight] = {}
        self._next = 1

    def __len__(self) -> int:
        return len(self.batches)

    def sent(self, seqs: set[int], lane: str, attempt: int = 0, now: float | None = None) -> None:
        """Track a batch just sent (``attempt``: how many times these records went unanswered
        before); its wait comes from the backoff."""
        at = time.monotonic() if now is None else now
        self.batches[self._next] = Flight(seqs, at, lane, at + self.backoff.wait(), attempt)
        self._next += 1

    def seqs(self) -> set[int]:
        """Every seq in flight."""
        out: set[int] = set()
        for flight in self.batches.values():
            out |= flight.seqs
        return out

    def answered(self, ranges: list[tuple[int, int]]) -> None:
        """The collector answered these seq ranges: they leave their batches (a batch answered
        whole leaves the window), and the backoff starts over."""
        self.backoff.reset()
        answered = covered(ranges)
        for key in list(self.batches):
            flight = self.batches[key]
            flight.seqs = {s for s in flight.seqs if not answered(s)}
            if not flight.seqs:
                del self.batches[key]

    def reconnected(self, now: float | None = None) -> None:
        """A new connection to the broker (a restarted broker or network): whatever kept the
        answers away may be over, so the backoff starts over and no batch waits longer than
        the first wait from now."""
        at = time.monotonic() if now is None else now
        self.backoff.reset()
        for flight in self.batches.values():
            flight.due = min(flight.due, at + self.backoff.first_s)

    def late(self, now: float | None = None) -> list[Flight]:
        """The batches whose wait is over, taken out of the window (the caller sends again what
        is still pending); each one counts as a miss of the backoff."""
        at = time.monotonic() if now is None else now
        out: list[Flight] = []
        for key, flight in list(self.batches.items()):
            if at >= flight.due:
                del self.batches[key]
                out.append(flight)
                self.backoff.missed(flight.attempt)
        return out
