"""``driver.unidentified`` in the pipeline: the vehicle moving with slot 1 empty."""

from __future__ import annotations

from collections.abc import Iterable

from collector.rules import crew
from collector.rules.context import Vehicle
from collector.rules.finding import Finding
from collector.rules.params import UnidentifiedParams
from collector.rules.rule import RuleBase, RuleContext


class Unidentified(RuleBase):
    """``driver.unidentified`` (CONTRAN 938/2022 art. 3 VI), driven by changes only."""

    params = ((crew.UNIDENTIFIED, UnidentifiedParams),)
    order = 20
    vehicle_tables = ("states",)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self.states: dict[str, crew.UnidentifiedState] = {}

    def on_vehicle(self, v: Vehicle, ms: int) -> None:
        """A vehicle's empty state."""
        self.states[v.id] = crew.UnidentifiedState()

    def on_change(self, v: Vehicle, ms: int) -> Finding | None:
        """Moving or slot 1 changed."""
        return crew.unidentified_change(self.states[v.id], v, ms)

    def open(self, as_of: int) -> Iterable[Finding | None]:
        """The episodes at ``as_of`` (judged without changing the states)."""
        for st in self.states.values():
            if st.start is not None:
                yield crew.unidentified_open(st, as_of)


RULE = Unidentified
