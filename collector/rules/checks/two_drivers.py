"""``driver.two_drivers`` in the pipeline: state per trip, following it to a replacement vehicle."""

from __future__ import annotations

import copy
from collections.abc import Iterable

from collector.rules import crew
from collector.rules.context import Trip, Vehicle
from collector.rules.finding import Finding
from collector.rules.params import TwoDriversParams
from collector.rules.rule import RuleBase, RuleContext


class TwoDrivers(RuleBase):
    """``driver.two_drivers`` (Decreto BA 4.342/1995 art. 86 §3), per trip."""

    params = ((crew.TWO_DRIVERS, TwoDriversParams),)
    order = 30

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self.states: dict[str, crew.TwoDriversState] = {}

    def on_trip_start(self, trip: Trip, v: Vehicle, ms: int) -> None:
        """A trip's empty state."""
        self.states[trip.id] = crew.TwoDriversState()

    def on_change(self, v: Vehicle, ms: int) -> None:
        """The trip's vehicle moved, stopped or changed drivers."""
        if v.trip is not None:
            crew.two_drivers_change(self.states[v.trip.id], v.trip, v, ms)

    def on_trip_leave(self, trip: Trip, v: Vehicle, ms: int) -> None:
        """The trip's vehicle handed it to a replacement."""
        crew.two_drivers_leave(self.states[trip.id], trip, ms)

    def on_trip_end(self, trip: Trip, v: Vehicle, ms: int) -> Finding | None:
        """The trip ended: the verdict."""
        st = self.states.pop(trip.id)
        crew.two_drivers_leave(st, trip, ms)
        return crew.two_drivers_finding(st, trip, ms)

    def open(self, as_of: int) -> Iterable[Finding | None]:
        """The trips still running at ``as_of``, judged so far (on copies)."""
        for trip in self.ctx.trips.values():
            st = self.states[trip.id]
            mine = copy.copy(st)
            mine.drivers = set(st.drivers)
            crew.two_drivers_leave(mine, trip, as_of)
            yield crew.two_drivers_finding(mine, trip, None)


RULE = TwoDrivers
