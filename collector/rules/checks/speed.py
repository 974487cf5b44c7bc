"""``speed.over_limit`` in the pipeline: every speed sample at the vehicle's current limit."""

from __future__ import annotations

from collections.abc import Iterable

from collector.rules import speed
from collector.rules.context import Vehicle
from collector.rules.finding import Finding
from collector.rules.params import SpeedParams
from collector.rules.rule import RuleBase, RuleContext


class SpeedLimit(RuleBase):
    """``speed.over_limit`` (CTB 61, 218): one finding per episode above the limit."""

    params = ((speed.RULE, SpeedParams),)
    order = 10
    samples = "all"
    vehicle_tables = ("states",)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self.states: dict[str, speed.SpeedState] = {}

    def on_vehicle(self, v: Vehicle, ms: int) -> None:
        """A vehicle's empty state."""
        self.states[v.id] = speed.SpeedState()

    def on_sample(self, v: Vehicle, ms: int, kmh: float) -> Finding | None:
        """One speed sample at the vehicle's current limit (a gap over ``silent_s`` closes)."""
        st = self.states[v.id]
        params = v.profile.rules[speed.RULE].params
        closed = speed.update(st, ms, kmh, v.limit_kmh, v.limit_source, params, v.silent_ms)
        found = speed.finding(st, closed, st.ctx[3].rules[speed.RULE].params) \
            if closed is not None and st.ctx is not None else None
        if st.start == ms:
            st.ctx = v.context()
            st.driver = v.slot_driver[1]
        return found

    def open(self, as_of: int) -> Iterable[Finding | None]:
        """The episodes still above the limit at the end of the data."""
        for st in self.states.values():
            episode = speed.open_episode(st)
            if episode is not None and st.ctx is not None:
                yield speed.finding(st, episode, st.ctx[3].rules[speed.RULE].params)


RULE = SpeedLimit
