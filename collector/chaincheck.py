"""Checking a store's records end to end: what ``frota verify`` runs (``docs/trust.md``).

For every agent of every vehicle — the entries made at the collector (agent ``operator``) are a
chain of their own, each signed by the collector (collector/entries.py) — from what is stored — never trusting a stored hash where the record
itself is there:

1. each stored record's chain hash is computed again from its JSON; it must equal the hash the
   collector saw at ingest (its row's ``hash``, or its ``links`` row: collector/store_chain.py):
   otherwise the record was **altered** in the store;
2. seqs run 1, 2, 3, … with nothing **missing** (a seq without a record or a hash-only entry, a
   link that says ``stored`` whose record is gone), and no record was **inserted** (a record the
   ingest never saw);
3. each record's ``prev`` is the hash of the record before it (a **chain_break** otherwise);
4. each checkpoint is signed by a key the fleet CA certified for that vehicle (for operator
   entries: for a collector), valid when the
   collector received it (**bad_signature** otherwise), and names the hash of the record at its
   seq (**chain_break**); the chain must be covered up to its last seq by a good checkpoint
   (records after it are **unsigned**);
5. registrador frame numbers (``device_seq``) of each vehicle run without gaps (**missing**
   frames), a counter that goes back counting as a restart, not a gap.

Each problem names the vehicle, agent, seq (or frame) and the record's time where known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from collector import store_disc
from collector.store import Store
from protocols.chain import GENESIS, Checkpoint, checkpoint_valid, try_hash
from protocols.keyring import Keyring

OPERATOR = "operator"


@dataclass(frozen=True)
class Problem:
    """One thing that does not verify."""

    vehicle: str
    agent: str
    seq: int | None
    cause: str  # altered, missing, inserted, chain_break, bad_signature, unsigned, conflict
    detail: str
    #: The record's time; for a stretch (a gap, unsigned records), the time of the record
    #: before it or of its first record. None: not known (that side of a stretch is open).
    ts_ms: int | None = None
    #: For a stretch, the time of its last record or of the record after it.
    end_ms: int | None = None
    stretch: bool = False

    def within(self, since_ms: int | None, until_ms: int | None) -> bool:
        """Whether the problem may lie in [since, until): one whose time is not known is always
        within; a stretch is within when it overlaps the period (an unknown end is open)."""
        lo = self.ts_ms
        hi = self.end_ms if self.stretch else lo
        if since_ms is not None and hi is not None and hi < since_ms:
            return False
        return not (until_ms is not None and lo is not None and lo >= until_ms)


@dataclass
class Report:
    """What :func:`check_store` found."""

    vehicles: int = 0
    agents: int = 0
    records: int = 0
    hash_only: int = 0
    checkpoints_good: int = 0
    operator_entries: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        """True when nothing is missing, altered or unverifiable."""
        return not self.problems


def _vehicles(store: Store, vehicle: str | None) -> list[str]:
    if vehicle is not None:
        return [vehicle]
    rows = store._read("SELECT DISTINCT vehicle FROM records UNION SELECT DISTINCT vehicle FROM links"
                       " UNION SELECT DISTINCT vehicle FROM disc_days")
    return sorted(str(r[0]) for r in rows)


def check_store(store: Store, keyring: Keyring | None, vehicle: str | None = None) -> Report:
    """Verify every chain of the store (of one vehicle); ``keyring`` None: checkpoints cannot
    be verified, which is itself a problem (unsigned)."""
    report = Report()
    for name in _vehicles(store, vehicle):
        report.vehicles += 1
        # the compacted days' records (collector/store_disc.py), read as the rows they were
        packed: dict[str, list[tuple[int, str, int]]] = {}
        frames: list[tuple[int, int]] = []
        # of a day whose links were folded into it: each seq -> the hash kept for it (the end
        # of a stretch of the chain) or None (its hash follows from the records after it)
        folded: dict[str, dict[int, str | None]] = {}
        for day in store_disc.days(store, name):
            ends = store_disc.folded_ends(store, day)
            for row in store_disc.day_rows(store, day):
                packed.setdefault(row.agent, []).append((row.seq, row.text, row.ts_ms))
                if row.device_seq is not None:
                    frames.append((int(row.device_seq), row.ts_ms))
                if ends is not None:
                    folded.setdefault(row.agent, {})[row.seq] = ends.get(row.agent, {}).get(
                        row.seq)
        agents = sorted(
            {str(r[0]) for r in store._read(
                "SELECT DISTINCT agent FROM records WHERE vehicle = ? "
                "UNION SELECT DISTINCT agent FROM links WHERE vehicle = ?", (name, name))}
            | set(packed)
        )
        for agent in agents:
            if agent == OPERATOR:
                report.operator_entries += int(store._read(
                    "SELECT count(*) FROM records WHERE vehicle = ? AND agent = ?", (name, agent)
                )[0][0]) + len(packed.get(agent, ()))
            else:
                report.agents += 1
            _check_agent(store, keyring, name, agent, report, packed.get(agent, []),
                         folded.get(agent, {}))
        _check_frames(store, name, report, frames)
        for seq, agent, detail, ts_ms in store._read(
            "SELECT seq, agent, detail, ts_ms FROM integrity WHERE vehicle = ? AND cause = 'conflict'",
            (name,),
        ):
            report.problems.append(Problem(name, str(agent), int(seq), "conflict", str(detail),
                                           None if ts_ms is None else int(ts_ms)))
    return report


def _check_agent(store: Store, keyring: Keyring | None, vehicle: str, agent: str,
                 report: Report, packed: list[tuple[int, str, int]],
                 folded: dict[int, str | None]) -> None:
    problems = report.problems
    links = {
        int(seq): (str(digest), prev, str(state))
        for seq, digest, prev, state in store._read(
            "SELECT seq, hash, prev, state FROM links WHERE vehicle = ? AND agent = ?",
            (vehicle, agent),
        )
    }
    records: dict[int, tuple[dict[str, Any] | None, int]] = {}
    # the hash received for each stored record, kept in its row (migration 019_records_hash)
    received: dict[int, str] = {}
    for seq, text, ts_ms, digest in [*store._read(
        "SELECT seq, record, ts_ms, hash FROM records WHERE vehicle = ? AND agent = ?",
        (vehicle, agent)
    ), *((seq, text, ts_ms, None) for seq, text, ts_ms in packed)]:
        try:
            rec = orjson.loads(text)
        except orjson.JSONDecodeError:
            rec = None
        records[int(seq)] = (rec if isinstance(rec, dict) else None, int(ts_ms))
        if digest is not None:
            received[int(seq)] = str(digest)
    report.records += len(records)
    # What each seq hashes to and what it says came before it: the record itself where stored.
    chain: dict[int, tuple[str | None, Any]] = {}
    for seq, (rec, ts_ms) in records.items():
        digest = try_hash(rec)
        link = links.get(seq)
        if link is None and seq in received:
            link = (received[seq], None, "stored")
        if link is None and seq in folded and digest is not None:
            # a compacted day's folded link: the hash kept for it, else its own (what comes
            # after it in the chain vouches for it: a changed record changes every prev after it)
            kept = folded[seq]
            link = (kept if kept is not None else digest, rec.get("prev") if rec else None,
                    "stored")
        if digest is None or rec is None:
            problems.append(Problem(vehicle, agent, seq, "altered", "stored record is not a record",
                                    ts_ms))
        elif link is None:
            problems.append(Problem(vehicle, agent, seq, "inserted", (
                "operator entry neither chained nor signed by the collector" if agent == OPERATOR
                else "stored record never came through the ingest"), ts_ms))
        elif link[0] != digest:
            problems.append(Problem(vehicle, agent, seq, "altered",
                                    "stored record differs from the one received", ts_ms))
        elif rec.get("seq") != seq:
            problems.append(Problem(vehicle, agent, seq, "altered",
                                    f"stored under seq {seq} but says seq {rec.get('seq')}", ts_ms))
        chain[seq] = (digest, rec.get("prev") if rec is not None else None)
    times = {seq: ts for seq, (_, ts) in records.items()}
    for seq, (digest, prev, state) in links.items():
        if seq in chain:
            continue
        if state in ("stored",):
            problems.append(Problem(vehicle, agent, seq, "missing",
                                    "record received and stored, now gone from the store",
                                    times.get(seq - 1), times.get(seq + 1), stretch=True))
        else:
            report.hash_only += 1
        chain[seq] = (digest, prev)
    if not chain:
        return
    last = max(chain)
    expected: str | None = GENESIS
    seq = 1
    while seq <= last:
        if seq not in chain:
            end = seq
            while end + 1 <= last and end + 1 not in chain:
                end += 1
            what = f"seq {seq}" if end == seq else f"seq {seq}-{end}"
            # between the record before the gap and the one after it (either may be unknown)
            problems.append(Problem(vehicle, agent, seq, "missing", f"{what} not in the store",
                                    times.get(seq - 1), times.get(end + 1), stretch=True))
            expected, seq = None, end + 1
            continue
        digest, prev = chain[seq]
        if expected is not None and prev != expected:
            problems.append(Problem(vehicle, agent, seq, "chain_break",
                                    "prev is not the hash of the record before it", times.get(seq)))
        expected, seq = digest, seq + 1
    _check_checkpoints(store, keyring, vehicle, agent, chain, times, report)


def _check_checkpoints(store: Store, keyring: Keyring | None, vehicle: str, agent: str,
                       chain: dict[int, tuple[str | None, Any]], times: dict[int, int],
                       report: Report) -> None:
    covered = 0
    for seq, digest, kid, sig, received_ms in store._read(
        "SELECT seq, hash, key, sig, received_ms FROM checkpoints WHERE vehicle = ? AND agent = ?",
        (vehicle, agent),
    ):
        seq = int(seq)
        entry = (keyring.checkpoint_signer(vehicle, agent, str(kid)) if keyring is not None
                 else None)
        cp = Checkpoint(seq, str(digest), str(kid), str(sig))
        if entry is None or not entry.valid_at(int(received_ms)) or not checkpoint_valid(
            entry.key, vehicle, agent, cp
        ):
            why = ("no keyring to check it against" if keyring is None else
                   "not signed by a key certified for this vehicle when received")
            report.problems.append(Problem(vehicle, agent, seq, "bad_signature",
                                           f"checkpoint {why}", times.get(seq)))
            continue
        if seq in chain and chain[seq][0] != cp.hash:
            report.problems.append(Problem(vehicle, agent, seq, "chain_break",
                                           "signed checkpoint names another record", times.get(seq)))
            continue
        report.checkpoints_good += 1
        covered = max(covered, seq)
    last = max(chain)
    if covered < last:
        report.problems.append(Problem(
            vehicle, agent, covered + 1, "unsigned",
            f"seq {covered + 1}-{last} not covered by a signed checkpoint", times.get(covered + 1),
            times.get(last), stretch=True))


def _check_frames(store: Store, vehicle: str, report: Report,
                  packed: list[tuple[int, int]]) -> None:
    """Gaps in the registrador's frame numbers, in device time order (``packed``: the
    (frame, ts) of the compacted days' records)."""
    earliest: dict[int, int] = {}
    for device_seq, ts_ms in [*store._read(
        "SELECT device_seq, min(ts_ms) FROM records WHERE vehicle = ? AND device_seq IS NOT NULL "
        "GROUP BY device_seq", (vehicle,)
    ), *packed]:
        number, ms = int(device_seq), int(ts_ms)
        earliest[number] = min(ms, earliest.get(number, ms))
    frames = sorted(earliest.items(), key=lambda item: (item[1], item[0]))
    # A prune (collector/retention.py) deletes frames up to its first instant kept; a frame gap
    # across such an instant is records pruned by law, not missing (a legal hold can keep an
    # older stretch, leaving the gap between it and the frames kept).
    pruned_at = sorted(int(r[0]) for r in store._read(
        "SELECT DISTINCT before_ms FROM prunes WHERE vehicle = ?", (vehicle,)))
    previous: int | None = None
    previous_ms = 0
    for device_seq, ts_ms in frames:
        number = int(device_seq)
        across_prune = any(previous_ms < at <= int(ts_ms) for at in pruned_at)
        if previous is not None and number > previous + 1 and not across_prune:
            first, last = previous + 1, number - 1
            what = f"frame {first}" if first == last else f"frames {first}-{last}"
            report.problems.append(Problem(vehicle, "registrador", first, "missing",
                                           f"registrador {what} not in the store", previous_ms,
                                           int(ts_ms), stretch=True))
        previous, previous_ms = number, int(ts_ms)
