"""Evaluation leases: which collector evaluates which partition when several collectors share one
PostgreSQL store (docs/deployment.md, "Several collectors: evaluation leases").

A lease is a row of ``live_leases`` (migration ``014_live_leases``): a partition, its holder
(the collector's ``broker.client_id``) and when it runs out, on the database's clock (never a
collector's). Each collector is a member (``live_members``, the same expiry) and holds at most
its share of the partitions (``ceil(partitions / live members)``): a collector that joins gets
partitions released by the others at their next claim; one that dies (SIGKILL, a frozen VM, a
lost network) stops renewing and its leases and membership run out after ``ttl_s``, after which
the survivors take its partitions at their next claim. Every write of a partition's evaluation
renews its lease in the same transaction and is rolled back when the lease is no longer the
writer's (collector/store_live.py), so a collector that wakes up after its lease ran out cannot
overwrite its successor's work. The table is the coordination: no process of our own decides.

SQLite holds one collector: no lease, every partition is its own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Final

from collector.store import Store

log = logging.getLogger(__name__)

#: The database's clock in ms (PostgreSQL): lease expiries never depend on a collector's clock.
NOW_MS: Final = "CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)"
#: Seconds a lease and a membership last without renewal (collector.toml [findings] lease_s).
TTL_S: Final = 30.0

RENEW_ONE: Final = (f"UPDATE live_leases SET until_ms = {NOW_MS} + ? "
                    f"WHERE part = ? AND holder = ? AND until_ms >= {NOW_MS}")


class LeaseLostError(Exception):
    """The partition's lease is not this collector's any more: its write was rolled back."""


class Leases:
    """This collector's leases on a store (PostgreSQL; on SQLite every partition is its own)."""

    def __init__(self, store: Store, holder: str, ttl_s: float = TTL_S) -> None:
        self.store = store
        self.holder = holder
        self.ttl_ms = int(ttl_s * 1000)
        self.held: list[str] = []
        #: partitions whose lease a claim took (free or run out) rather than renewed, since the
        #: live rules last looked: another collector may have judged them meanwhile, so a state
        #: this collector kept in memory for them is stale (LiveRules.evaluate drops it)
        self.taken: set[str] = set()

    @property
    def shared(self) -> bool:
        """Whether leases are taken at all (a PostgreSQL store)."""
        return self.store.dialect == "postgresql"

    def claim(self, parts: Sequence[str]) -> list[str]:
        """Renew this collector's membership and leases, give back what is beyond its share, take
        free or run-out partitions up to its share; return the partitions it holds, sorted."""
        if not self.shared:
            self.held = sorted(parts)
            return self.held
        store, ttl, me = self.store, self.ttl_ms, self.holder
        wanted = sorted(set(parts))
        with store._lock, store._transaction() as tx:
            def run(sql: str, *rows: tuple[object, ...]) -> None:
                store._executemany(tx, sql, list(rows))
            run(f"INSERT INTO live_members (holder, until_ms) VALUES (?, {NOW_MS} + ?) "
                "ON CONFLICT (holder) DO UPDATE SET until_ms = excluded.until_ms", (me, ttl))
            run(f"DELETE FROM live_members WHERE until_ms < {NOW_MS}", ())
            run(f"UPDATE live_leases SET until_ms = {NOW_MS} + ? WHERE holder = ? "
                f"AND until_ms >= {NOW_MS}", (ttl, me))
            members = int(store._query("SELECT count(*) FROM live_members")[0][0])
            share = math.ceil(len(wanted) / max(members, 1))
            mine = [str(p) for (p,) in store._query(
                f"SELECT part FROM live_leases WHERE holder = ? AND until_ms >= {NOW_MS} "
                "ORDER BY part", (me,))]
            extra = [p for p in mine if p not in wanted] + [p for p in mine if p in wanted][share:]
            if extra:
                run("DELETE FROM live_leases WHERE part = ? AND holder = ?",
                    *((p, me) for p in extra))
            mine = [p for p in mine if p not in extra]
            for part in wanted:
                if len(mine) >= share:
                    break
                if part in mine:
                    continue
                got = store._query(
                    f"INSERT INTO live_leases (part, holder, until_ms) VALUES (?, ?, {NOW_MS} + ?) "
                    "ON CONFLICT (part) DO UPDATE SET holder = excluded.holder, "
                    f"until_ms = excluded.until_ms WHERE live_leases.until_ms < {NOW_MS} "
                    "RETURNING part", (part, me, ttl))
                if got:
                    mine.append(part)
                    self.taken.add(part)
        if sorted(mine) != self.held:
            log.info("findings: %s evaluates %s (%d live collectors)", me,
                     ", ".join(sorted(mine)) or "no partition", members)
        self.held = sorted(mine)
        return self.held

    def renew(self, part: str) -> None:
        """Renew one lease now (a long replay); LeaseLostError when it is not this collector's."""
        if not self.shared:
            return
        store = self.store
        with store._lock, store._transaction() as tx:
            if store._executemany(tx, RENEW_ONE, [(self.ttl_ms, part, self.holder)]) != 1:
                raise LeaseLostError(part)

    def release(self) -> None:
        """Give every lease and the membership back (a clean stop: the others take over at once)."""
        if not self.shared:
            return
        self.store.apply([("DELETE FROM live_leases WHERE holder = ?", [(self.holder,)]),
                          ("DELETE FROM live_members WHERE holder = ?", [(self.holder,)])])
        self.held = []
