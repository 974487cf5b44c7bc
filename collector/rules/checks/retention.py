"""``retention.minimum`` (SP 61 §3; TO 66 §1): its profile section and parameters.

Evaluated by the store (how long records are kept), not on records, so it has no hooks here."""

from __future__ import annotations

from collector.rules.params import RetentionParams
from collector.rules.rule import RuleBase


class Retention(RuleBase):
    """``retention.minimum``: parameters only."""

    params = (("retention.minimum", RetentionParams),)
    order = 900


RULE = Retention
