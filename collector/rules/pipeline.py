"""The one ordered pipeline of rules, found rather than listed.

Every module of ``collector/rules/checks/`` that defines ``RULE`` is a rule of the pipeline; so is
every ``frota.rules`` entry point of an installed package (a module defining ``RULE``, or the
class itself), so a rule can also ship outside Frota. They run in ``order`` (then module name).
:data:`RULE_PARAMS` — every rule id and the dataclass of its parameters — is derived from them:
it is what a profile's ``[rules."<id>"]`` sections are validated against.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from collector.rules import checks
from collector.rules.rule import HOOKS, RuleBase, RuleContext

#: A rule class (calling it with the context gives the run's instance).
RuleType = type[RuleBase]

GROUP = "frota.rules"


class PipelineError(RuntimeError):
    """Two rules claim one id, or a plug-in is not a rule."""


def _rule_of(obj: Any, where: str) -> RuleType:
    rule = getattr(obj, "RULE", None) if isinstance(obj, ModuleType) else obj
    if not (isinstance(rule, type) and issubclass(rule, RuleBase)):
        raise PipelineError(f"{where}: not a rule (a module with RULE, or a RuleBase class)")
    return rule


def discover(extra: Iterable[Any] = ()) -> tuple[RuleType, ...]:
    """The rules of ``collector/rules/checks/``, the installed ``frota.rules`` entry points, and
    ``extra`` (modules or classes), in pipeline order."""
    found: list[RuleType] = []
    for info in pkgutil.iter_modules(checks.__path__):
        module = importlib.import_module(f"{checks.__name__}.{info.name}")
        if getattr(module, "RULE", None) is not None:
            found.append(_rule_of(module, module.__name__))
    for point in entry_points(group=GROUP):
        found.append(_rule_of(point.load(), f"entry point {point.name!r} ({point.value})"))
    found.extend(_rule_of(obj, repr(obj)) for obj in extra)
    return tuple(sorted(dict.fromkeys(found), key=lambda r: (r.order, r.__module__)))


def params_of(rules: Iterable[RuleType]) -> dict[str, type]:
    """Every rule id of these rules and the dataclass of its parameters."""
    table: dict[str, type] = {}
    owner: dict[str, str] = {}
    for rule in rules:
        for rule_id, params in rule.params:
            if rule_id in table:
                raise PipelineError(f"rule id {rule_id!r} is claimed by {owner[rule_id]} and "
                                    f"{rule.__module__}")
            table[rule_id] = params
            owner[rule_id] = rule.__module__
    return table


#: The pipeline, in order.
RULES: tuple[RuleType, ...] = discover()
#: Every rule id and the dataclass of its parameters (a profile has a section for each).
RULE_PARAMS: dict[str, type] = params_of(RULES)


class Pipeline:
    """One evaluation's rule instances, and for each hook the instances that override it."""

    def __init__(self, rules: Iterable[RuleType], ctx: RuleContext,
                 instances: list[RuleBase] | None = None) -> None:
        #: ``instances``: rule objects made before (restored from a checkpoint), in order
        self.rules = instances if instances is not None else [rule(ctx) for rule in rules]
        self.hooks: dict[str, list[Callable[..., Any]]] = {}
        for hook in HOOKS:
            base = getattr(RuleBase, hook)
            self.hooks[hook] = [getattr(r, hook) for r in self.rules
                                if getattr(type(r), hook) is not base]
        #: the sample hook of rules that take every sample
        self.every_sample = [r.on_sample for r in self.rules
                             if r.samples == "all" and "on_sample" in _overrides(r)]
        #: (hot set, sample hook) of rules that take the samples of their hot vehicles
        self.hot_sample = [(r.hot, r.on_sample) for r in self.rules
                           if r.samples == "hot" and "on_sample" in _overrides(r)]


def _overrides(rule: RuleBase) -> set[str]:
    return {hook for hook in HOOKS if getattr(type(rule), hook) is not getattr(RuleBase, hook)}


def implemented_rules(rules: Iterable[RuleType] = RULES) -> set[str]:
    """The rule ids evaluated on records (those with at least one hook)."""
    return {rule_id for rule in rules if any(
        getattr(rule, hook) is not getattr(RuleBase, hook) for hook in HOOKS)
        for rule_id in rule.ids}
