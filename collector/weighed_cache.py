"""A cache of the last values used, bounded by how many it keeps and by their total weight (bytes,
records): the decoded and projected compacted days (``collector/store_disc.py``,
``collector/disc_columns.py``). ``functools.lru_cache`` counts entries only, and a day of one bus
weighs a hundred times a day of a quiet one: counted alone, eight decoded days held 1.2 GB of a
collector's memory for good."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class WeighedCache(Generic[K, V]):
    """At most ``max_entries`` values weighing at most ``max_weight`` together, the least
    recently used forgotten first; safe to share between threads."""

    def __init__(self, max_entries: int, max_weight: int) -> None:
        self.max_entries = max_entries
        self.max_weight = max_weight
        self._kept: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> tuple[V] | None:
        """``(value,)`` when kept (now the most recently used), else None (a kept value may be
        None itself)."""
        with self._lock:
            hit = self._kept.get(key)
            if hit is None:
                return None
            self._kept.move_to_end(key)
            return (hit[0],)

    def put(self, key: K, value: V, weight: int) -> None:
        """Keep ``value`` (unless it alone weighs more than the whole cache), forgetting the
        least recently used values past the bounds."""
        if weight > self.max_weight:
            return
        with self._lock:
            if key not in self._kept:
                self._kept[key] = (value, weight)
                self._weight += weight
            while len(self._kept) > self.max_entries or self._weight > self.max_weight:
                self._weight -= self._kept.popitem(last=False)[1][1]

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._kept.clear()
            self._weight = 0

    @property
    def weight(self) -> int:
        """The kept values' weight together."""
        return self._weight

    def values(self) -> Iterator[V]:
        """The kept values, least recently used first."""
        with self._lock:
            kept = [value for value, _ in self._kept.values()]
        return iter(kept)

    def __len__(self) -> int:
        return len(self._kept)
