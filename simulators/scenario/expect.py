"""Does a list of findings say what a scenario's ``[expect]`` table says the law expects?"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from simulators.scenario.model import Expect

#: Severities that are not violations (statistics; early warnings): ``only`` does not hold them
#: to the list.
STATISTICS = ("report", "notice")


def problems(expect: Expect, findings: Iterable[Mapping[str, Any]]) -> list[str]:
    """What is wrong with ``findings`` against ``expect`` (empty when they match)."""
    found = [(str(f.get("rule")), str(f.get("severity"))) for f in findings]
    counts = Counter(found)
    out: list[str] = []
    listed: set[str] = set()
    for want in expect.findings:
        listed.add(want.rule)
        n = sum(c for (rule, sev), c in counts.items()
                if rule == want.rule and (want.severity is None or sev == want.severity))
        if n < want.min_count:
            sev = f" ({want.severity})" if want.severity else ""
            out.append(f"expected {want.min_count}× {want.rule}{sev}, found {n}")
    for rule in expect.absent:
        n = sum(c for (r, _), c in counts.items() if r == rule)
        if n:
            out.append(f"expected no {rule}, found {n}")
    if expect.only:
        for (rule, sev), n in sorted(counts.items()):
            if rule not in listed and sev not in STATISTICS and rule not in expect.absent:
                out.append(f"unexpected {n}× {rule} ({sev})")
    return out
