"""``frota collector rejects replay`` (issue 15 item 5): records rejected for an unknown vehicle
reach the store once the registry has it, exactly once; final rejects are not tried again.

The story of issue 15: an agent for GHOST01 sends before the bus is in the registry. Its two
batches (seq 1-3, 4-5) are refused whole as retryable ("unknown vehicle"), with a malformed
payload beside them (final). The registry gains GHOST01; the replay stores the 5 records and marks
both rows; a second replay, and the agent sending batch 1-3 again itself, add nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector.ingest import Ingest
from collector.rejects_replay import replay
from collector.store import Store, open_store
from frota.cli import main
from protocols.uplink import Ack, encode_batch
from tests.collector.helpers import speed

GHOST = "GHOST01"
TOPIC = f"frota/v1/{GHOST}/up"
NOW = 1_800_000_000_000


def _batch(seqs: range) -> bytes:
    return encode_batch(GHOST, "g1", [speed(GHOST, "g1", s) for s in seqs])


def _refused(store: Store) -> None:
    """The two batches and the junk, sent before GHOST01 is in the registry."""
    ingest = Ingest(store, lambda: frozenset())
    answer = ingest.handle(TOPIC, _batch(range(1, 4)))
    assert answer is not None
    assert answer[1].rejected == [(1, 3, "unknown vehicle 'GHOST01' (not in the fleet registry)")]
    assert answer[1].retryable == [True]
    ingest.handle(TOPIC, _batch(range(4, 6)))
    ingest.handle(TOPIC, b"junk")
    assert (store.count(GHOST), store.reject_count()) == (0, 3)


def _seqs(store: Store) -> list[int]:
    return [json.loads(t)["seq"] for t in store.records(GHOST)]


def test_rejects_for_an_unknown_vehicle_reach_the_store_once_it_is_known(store_url: str) -> None:
    store = open_store(store_url)
    try:
        _refused(store)
        # still unknown: nothing stored, the two retryable rows left for later, the junk final
        first = replay(store, lambda: frozenset(), NOW)
        assert (first.replayed, first.still_retryable, first.final) == (0, 2, 1)
        assert _seqs(store) == []
        # the registry has it now
        known = frozenset({GHOST})
        second = replay(store, lambda: known, NOW + 1)
        assert (second.replayed, second.stored_records, second.duplicates) == (2, 5, 0)
        assert (second.still_retryable, second.final) == (0, 0)   # the junk is not read again
        assert _seqs(store) == [1, 2, 3, 4, 5]
        # again: nothing left to replay
        third = replay(store, lambda: known, NOW + 2)
        assert (third.replayed, third.stored_records) == (0, 0)
        # the agent sends batch 1-3 again itself: acknowledged as stored, stored once
        assert Ingest(store, lambda: known).handle(TOPIC, _batch(range(1, 4))) == (
            GHOST, Ack("g1", stored=[(1, 3)]))
        assert _seqs(store) == [1, 2, 3, 4, 5]
        marks = sorted(str(r[0]) for r in store._read(
            "SELECT replay FROM rejects WHERE replayed_ms IS NOT NULL"))
        assert marks[1:] == ["stored 2", "stored 3"]   # batch 4-5, batch 1-3
        assert marks[0].startswith("final: ")          # the junk
        # the chain hashes of the replayed records are in their rows, as for a live batch
        assert int(store._read("SELECT count(*) FROM records WHERE vehicle = ? AND hash IS NOT "
                               "NULL", (GHOST,))[0][0]) == 5
    finally:
        store.close()


def test_replay_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "collector.db"
    store = open_store(str(db))
    _refused(store)
    store.close()
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"lines": [], "drivers": [],
                                 "vehicles": [{"id": GHOST, "seats": 46}]}))
    config = tmp_path / "collector.toml"
    config.write_text('registry = "fleet.json"\n[database]\npath = "collector.db"\n')
    assert main(["collector", "rejects", "replay", "--config", str(config), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("2 rejects accepted now: would store 5 records")
    assert main(["collector", "rejects", "replay", "--config", str(config)]) == 0
    assert capsys.readouterr().out == ("2 rejects accepted now: stored 5 records (0 already "
                                       "stored); 0 still refused for a cause that may change; "
                                       "1 final\n")
    store = open_store(str(db))
    assert _seqs(store) == [1, 2, 3, 4, 5]
    store.close()
