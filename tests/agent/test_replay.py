"""``frota agent replay`` (issue 15 item 5): the records the collector rejected as retryable are
kept (never evicted) and sent again; final rejects and conflicts are not.

End to end, the story of issue 15: an agent for a bus not yet in the collector's registry sends
its records; they come back rejected, retryable ("unknown vehicle"). The bus is added to the
registry; ``frota agent replay`` makes them pending again and the running uplink sends them: the
collector stores each exactly once. The collector's own copy of the rejects, replayed afterwards
(``frota collector rejects replay``), adds nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.buffer import Buffer
from collector.store import open_store
from frota.cli import main
from tests.agent.helpers import speed, wait_until
from tests.trust.fleet import A, B, capture, running_fleet, uplink
from tests.trust.fleet import speed as frame


def test_replay_makes_only_retryable_rejects_pending_again(tmp_path: Path) -> None:
    buf = Buffer(tmp_path / "b.sqlite")
    buf.add([("reg", speed(n)) for n in range(8)])           # seq 1-8
    buf.mark([(1, 2)], [(3, 4, "unknown vehicle"), (5, 5, "invalid record")], conflicts=[6],
             retryable=[True, False])
    counts = buf.counts()
    assert (counts.stored, counts.rejected, counts.retryable, counts.conflicts,
            counts.pending) == (2, 3, 2, 1, 2)
    # never evicted: only stored records make room on a full disk, or expire
    assert buf.evict_oldest(100) == 2
    assert buf.expire(1 << 62) == 0
    assert buf.replay_gen() == 0
    assert buf.replay_rejected(4, 4) == 1
    assert buf.replay_gen() == 1
    assert buf.replay_rejected() == 1                          # seq 3 now
    assert buf.replay_rejected() == 0
    assert buf.replay_gen() == 2
    states = dict(buf.conn.execute("SELECT seq, state FROM records").fetchall())
    assert states == {3: 0, 4: 0, 5: 2, 6: 3, 7: 0, 8: 0}
    buf.close()


@pytest.mark.parametrize(("seq", "message"), [("x", "--seq 'x' is not A-B nor A (seq numbers)"),
                                              ("5-2", "--seq '5-2': need 1 <= A <= B")])
def test_a_bad_seq_range_is_one_line(seq: str, message: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "replay", "--config", str(tmp_path / "none.toml"), "--seq", seq]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.mosquitto
@pytest.mark.slow
def test_rejected_for_an_unknown_vehicle_then_replayed_reaches_the_store_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    with running_fleet(registered=(A,)) as fleet:
        config = fleet.agent_config(B)
        capture(config, [frame(B, n) for n in range(1, 11)])
        with uplink(config) as up:
            assert wait_until(lambda: up.buffer.counts().retryable == 10, 30), \
                fleet.log.read_text()
            # the bus is added to the registry (the collector re-reads it within a second)
            registry = Path(fleet.broker.fleet.registry)
            fleet_json = json.loads(registry.read_text())
            fleet_json["vehicles"].append({"id": B, "seats": 46})
            registry.write_text(json.dumps(fleet_json))
            agent_toml = str(fleet.folder / "vehicles" / B / "agent.toml")

            # the collector re-reads the registry within a second: replay until all are stored
            # (a replay sent before the reload comes back retryable again)
            def stored_all() -> bool:
                if up.buffer.counts().retryable:
                    assert main(["agent", "replay", "--config", agent_toml]) == 0
                return up.buffer.counts().stored == 10

            assert wait_until(stored_all, 30), fleet.log.read_text()
            assert "will be sent again" in capsys.readouterr().out
        collector_toml = str(fleet.folder / "collector.toml")
        assert main(["collector", "rejects", "replay", "--config", collector_toml]) == 0
        out = capsys.readouterr().out
        assert "stored 0 records" in out   # each record is in the store once already
        store = open_store(str(fleet.db), read_only=True)
        try:
            seqs = [json.loads(t)["seq"] for t in store.records(B)]
        finally:
            store.close()
        assert seqs == list(range(1, 11))


@pytest.mark.mosquitto
@pytest.mark.slow
def test_the_collector_announces_an_added_vehicle_and_its_agent_replays_by_itself() -> None:
    with running_fleet(registered=(A,)) as fleet:
        config = fleet.agent_config(B)
        capture(config, [frame(B, n) for n in range(1, 11)])
        with uplink(config) as up:
            assert wait_until(lambda: up.buffer.counts().retryable == 10, 30), \
                fleet.log.read_text()
            registry = Path(fleet.broker.fleet.registry)
            fleet_json = json.loads(registry.read_text())
            fleet_json["vehicles"].append({"id": B, "seats": 46})
            registry.write_text(json.dumps(fleet_json))
            # no command: the collector sees the new vehicle, tells B's agent (a signed ack
            # with replay set), and the agent sends its retryable rejects again
            assert wait_until(lambda: up.buffer.counts().stored == 10, 30), \
                fleet.log.read_text()
            assert up.gate.counters.bad_signatures == 0
            assert up.buffer.replay_gen() == 1
        assert "told to send their retryable rejects again" in fleet.log.read_text()
        store = open_store(str(fleet.db), read_only=True)
        try:
            assert [json.loads(t)["seq"] for t in store.records(B)] == list(range(1, 11))
        finally:
            store.close()


def test_the_replay_announcement_on_the_wire() -> None:
    from protocols.uplink import Ack, PayloadError, decode_ack, encode_ack

    wire = encode_ack(Ack(agent="g1", vehicle=B, replay=True))
    assert b'"replay":true' in wire
    assert decode_ack(wire).replay is True
    assert decode_ack(encode_ack(Ack(agent="g1"))).replay is False   # absent: false
    with pytest.raises(PayloadError, match="'replay' is not true or false"):
        decode_ack(wire.replace(b'"replay":true', b'"replay":1'))
