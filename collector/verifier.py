"""The collector's live check of the agents' chains and checkpoints (``docs/trust.md``).

A background thread, every ``interval_s``: for each agent, the chain received since the last
pass (the stored records' hashes and ``prev`` in their rows, the hash-only entries of ``links``,
collector/store_chain.py; a batch the ingest of this process stored whole was checked inside as
it was committed and handed over as a stretch, of which only the ends are left to walk) is walked as far as they are contiguous (live records run ahead of a backlog, so a stretch
is verified once the seqs before it have arrived): each ``prev`` must be the hash of the record
before it. Each new checkpoint is verified against the keyring (a key certified for the vehicle,
valid when the checkpoint was received) and against the hash of the record at its seq once that
has arrived. What fails becomes an ``integrity`` row (``chain_break``, ``bad_signature``; the
ingest adds ``conflict``), shown as an ``equipment.integrity`` finding. ``frota verify`` checks
the whole store again from the records themselves (collector/chaincheck.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Any, Final

from collector.store import Store
from collector.store_chain import INSERT_INTEGRITY, Stretches
from protocols.chain import GENESIS, Checkpoint, checkpoint_valid
from protocols.identity import IdentityError, load_cert_file
from protocols.keyring import Keyring, load_keyring
from protocols.records import ms_to_ts, now_ms

log = logging.getLogger(__name__)

#: Links read per agent per pass (a long backlog is verified over several passes).
PAGE: Final = 5000
BASIS: Final = ("CTB art. 105 II", "Resolução CONTRAN 938/2022")


class ChainVerifier:
    """Verifies new links and checkpoints of a store; :meth:`run_once` is one pass."""

    def __init__(self, store: Store, ca_file: Path, keyring_path: Path,
                 interval_s: float = 2.0) -> None:
        self.store = store
        self.ca = load_cert_file(ca_file)
        self.keyring_path = keyring_path
        self.interval_s = interval_s
        self._stamp: tuple[int, int] | None = None
        self.keyring = Keyring([])
        self._reload()
        if store.fresh_stretches is None:  # the ingest hands over what it checked
            store.fresh_stretches = Stretches()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chain-verifier", daemon=True)

    def _reload(self) -> None:
        try:
            st = os.stat(self.keyring_path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                self.keyring = load_keyring(self.keyring_path, self.ca)
                self._stamp = stamp
                for problem in self.keyring.problems:
                    log.error("keyring: %s", problem)
        except (OSError, IdentityError) as err:
            log.error("keyring not (re)loaded, keeping the previous one: %s", err)

    def start(self) -> None:
        """Start the background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop it."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:  # the verifier must never take the collector down
                log.exception("chain verifier: pass failed")

    def run_once(self) -> int:
        """One pass; returns how many integrity events it found."""
        self._reload()
        events: list[tuple[Any, ...]] = []
        cursors: list[tuple[Any, ...]] = []
        now = now_ms()
        read = self.store._read
        state = {(v, a): (int(s), str(h)) for v, a, s, h in read(
            "SELECT vehicle, agent, seq, hash FROM chain_state")}
        fresh = self.store.fresh_stretches
        assert fresh is not None  # set in __init__
        for vehicle, agent, top in self._agents():
            seq, expected = state.get((vehicle, agent), (0, GENESIS))
            if int(top) <= seq:
                fresh.forget(vehicle, agent, seq)
                continue
            start = seq
            paged = False
            while True:
                # a stretch the ingest committed and checked inside: only where it meets the
                # chain before it is left to check
                stretch = fresh.take(vehicle, agent, seq + 1)
                if stretch is not None:
                    if stretch.prev != expected:
                        events.append((vehicle, agent, stretch.first, "chain_break",
                                       "prev is not the hash of the record before it", None,
                                       now))
                    seq, expected = stretch.last, stretch.hash
                    continue
                if paged:
                    break  # one page read from the store per agent and pass
                paged, before = True, seq
                for link_seq, digest, prev in self._page(vehicle, agent, seq):
                    if link_seq != seq + 1:
                        break  # not contiguous yet: the rest waits for the seqs before it
                    if prev != expected:
                        events.append((vehicle, agent, link_seq, "chain_break",
                                       "prev is not the hash of the record before it", None,
                                       now))
                    seq, expected = link_seq, digest
                if seq == before:
                    break
            fresh.forget(vehicle, agent, seq)
            if seq != start:
                cursors.append((vehicle, agent, seq, str(expected)))
        checked: list[tuple[Any, ...]] = []
        # each new checkpoint with the hash received at its seq (its link's, else its record's:
        # collector/store_chain.py), in one query
        for vehicle, agent, seq, digest, kid, sig, received, link, own in read(
            "SELECT c.vehicle, c.agent, c.seq, c.hash, c.key, c.sig, c.received_ms, l.hash, "
            "r.hash FROM checkpoints c LEFT JOIN links l ON l.vehicle = c.vehicle AND "
            "l.agent = c.agent AND l.seq = c.seq LEFT JOIN records r ON r.vehicle = c.vehicle "
            "AND r.agent = c.agent AND r.seq = c.seq WHERE c.state = 'new' LIMIT ?", (PAGE,)
        ):
            verdict = self._checkpoint(vehicle, agent, Checkpoint(int(seq), digest, kid, sig),
                                       int(received), link if link is not None else own,
                                       events, now)
            if verdict is not None:
                checked.append((verdict, vehicle, agent, seq, kid))
        self.store.apply([
            (INSERT_INTEGRITY, events),
            ("INSERT INTO chain_state (vehicle, agent, seq, hash) VALUES (?, ?, ?, ?) "
             "ON CONFLICT (vehicle, agent) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
             cursors),
            ("UPDATE checkpoints SET state = ? WHERE vehicle = ? AND agent = ? AND seq = ? "
             "AND key = ?", checked),
        ])
        for event in events:
            log.warning("integrity: %s agent %s seq %s: %s (%s)", *event[:5])
        return len(events)

    def _page(self, vehicle: str, agent: str, after: int) -> list[tuple[Any, ...]]:
        """The next (seq, hash, prev) of the agent's chain after ``after``, in seq order, up to
        :data:`PAGE` of them: the stored records' own (``records.hash``, ``prev``) and the
        hash-only entries of ``links`` (a link wins where a seq has both: the first seen)."""
        read = self.store._read
        params = (vehicle, agent, after, PAGE)
        rows = read("SELECT seq, hash, prev FROM records WHERE vehicle = ? AND agent = ? "
                    "AND seq > ? AND hash IS NOT NULL ORDER BY seq LIMIT ?", params)
        links = read("SELECT seq, hash, prev FROM links WHERE vehicle = ? AND agent = ? "
                     "AND seq > ? ORDER BY seq LIMIT ?", params)
        if not links:
            return rows  # both backends give seq as an int and hash as a str
        merged = {int(q): (str(h), p) for q, h, p in rows}
        merged.update((int(q), (str(h), p)) for q, h, p in links)
        # a full page of either ends what is known: past its last seq the other may run ahead
        end = min([int(page[-1][0]) for page in (rows, links) if len(page) == PAGE],
                  default=None)
        return [(q, h, p) for q, (h, p) in sorted(merged.items()) if end is None or q <= end]

    def _agents(self) -> list[tuple[str, str, int]]:
        """Every (vehicle, agent) of the chain (stored records and hash-only entries) with its
        highest seq."""
        tops: dict[tuple[str, str], int] = {}
        for table in ("records", "links"):
            for vehicle, agent, top in self._agents_of(table):
                tops[(vehicle, agent)] = max(top, tops.get((vehicle, agent), top))
        return [(vehicle, agent, top) for (vehicle, agent), top in sorted(tops.items())]

    def _agents_of(self, table: str) -> list[tuple[str, str, int]]:
        """Every (vehicle, agent) of ``table`` (``records`` or ``links``, each keyed on
        (vehicle, agent, seq)) with its highest seq, by a loose index scan: two seeks on the
        key per agent (its highest seq, then the next agent after it), so a pass costs the
        number of agents, not of rows (``GROUP BY vehicle, agent`` read every link: 1.5 s a
        pass for 2 million of them, every ``interval_s``)."""
        read = self.store._read
        out: list[tuple[str, str, int]] = []
        first = read(f"SELECT vehicle, agent FROM {table} ORDER BY vehicle, agent, seq LIMIT 1")
        while first:
            vehicle, agent = str(first[0][0]), str(first[0][1])
            top = int(read(f"SELECT max(seq) FROM {table} WHERE vehicle = ? AND agent = ?",
                           (vehicle, agent))[0][0])
            out.append((vehicle, agent, top))
            first = read(f"SELECT vehicle, agent FROM {table} WHERE (vehicle, agent, seq) > "
                         "(?, ?, ?) ORDER BY vehicle, agent, seq LIMIT 1", (vehicle, agent, top))
        return out

    def _checkpoint(self, vehicle: str, agent: str, cp: Checkpoint, received_ms: int,
                    link: str | None, events: list[tuple[Any, ...]], now: int) -> str | None:
        """The verdict on a checkpoint (``link``: the hash received at its seq, None when its
        record has not arrived yet): ``good``, ``bad``, or None (not yet)."""
        entry = self.keyring.checkpoint_signer(vehicle, agent, cp.key)
        if entry is None or not entry.valid_at(received_ms) or not checkpoint_valid(
            entry.key, vehicle, agent, cp
        ):
            events.append((vehicle, agent, cp.seq, "bad_signature",
                           "checkpoint not signed by a key certified for this vehicle (or, for operator "
                           "entries, for a collector)", None, now))
            return "bad"
        if link is None:
            return None  # its record has not arrived yet
        if link != cp.hash:
            events.append((vehicle, agent, cp.seq, "chain_break",
                           "signed checkpoint names another record than the one stored", None, now))
            return "bad"
        return "good"


def integrity_findings(store: Store, profile: str) -> list[dict[str, Any]]:
    """The store's integrity events as ``equipment.integrity`` findings (store-only, like
    ``retention.minimum``; severity ``warning``: the evidence of that vehicle cannot be relied
    on there, whoever caused it)."""
    out: list[dict[str, Any]] = []
    for vehicle, agent, seq, cause, detail, ts_ms, found_ms in store._read(
        "SELECT vehicle, agent, seq, cause, detail, ts_ms, found_ms FROM integrity"
    ):
        at = int(ts_ms if ts_ms is not None else found_ms)
        text = f"equipment.integrity|{vehicle}|{agent}|{seq}|{cause}"
        out.append({
            "id": hashlib.sha256(text.encode()).hexdigest()[:20],
            "rule": "equipment.integrity",
            "profile": profile,
            "severity": "warning",
            "vehicle": vehicle,
            "driver": None,
            "trip": None,
            "line": None,
            "start": ms_to_ts(at),
            "end": None,
            "basis": list(BASIS),
            "details": {"cause": cause, "agent": agent, "seq": int(seq), "detail": detail},
        })
    return out
