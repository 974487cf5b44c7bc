"""The agent signs its chain at least once a minute by its monotonic clock, even when nothing is
sent; none is owed when nothing was recorded since the last checkpoint; the collector keeps a
checkpoint that travels alone (``firmware-notes/mqtt.md``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.buffer import Buffer
from agent.checkpoints import CHECKPOINT_EVERY_S, CheckpointSigner
from agent.config import load_config
from agent.uplink import Uplink
from collector.chaincheck import check_store
from collector.ingest import Ingest
from collector.store import open_store
from collector.verifier import ChainVerifier
from frota.cli import main
from protocols import identity
from protocols.chain import Checkpoint, checkpoint_valid
from protocols.keyring import load_keyring
from protocols.uplink import encode_batch
from tests.trust.fleet import A, speed


class FakeClock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_minute_is_sixty_seconds() -> None:
    assert CHECKPOINT_EVERY_S == 60.0  # firmware-notes/mqtt.md: "at least once a minute"


def test_a_checkpoint_is_owed_each_minute_only_when_something_new_was_recorded(
    tmp_path: Path,
) -> None:
    key = identity.new_signing_key()
    buf = Buffer(tmp_path / "buffer.db")
    clock = FakeClock()
    try:
        signer = CheckpointSigner(key, A, buf.agent, clock)
        buf.add([("registrador", speed(A, n)) for n in (1, 2, 3)])
        clock.now += 59.9
        signer.tick(buf)
        assert signer.held is None  # not a minute yet
        clock.now += 0.1
        signer.tick(buf)
        held = signer.held
        assert held is not None
        assert held["seq"] == 3
        assert held["hash"] == buf.hashes([3])[3]
        assert checkpoint_valid(key.public_key(), A, buf.agent, Checkpoint(
            3, str(held["hash"]), str(held["key"]), str(held["sig"])))
        # sent (or not): nothing new recorded since seq 3, so nothing is owed however long
        signer.held = None
        clock.now += 600
        signer.tick(buf)
        assert signer.held is None
        assert signer.timer_signed == 1
        # a new record after a long quiet spell: owed at once (more than a minute since seq 3)
        buf.add([("registrador", speed(A, 4))])
        signer.tick(buf)
        assert signer.held is not None
        assert signer.held["seq"] == 4
        # a batch's checkpoint at or past the held seq covers it, and restarts the minute
        buf.add([("registrador", speed(A, 5))])
        signer.for_batch(5, buf.hashes([5])[5])
        assert signer.held is None
        clock.now += 59
        buf.add([("registrador", speed(A, 6))])
        signer.tick(buf)
        assert signer.held is None
        # a backlog batch's older checkpoint does not restart it
        clock.now += 0.5
        signer.for_batch(2, buf.hashes([2])[2])
        clock.now += 0.5
        signer.tick(buf)
        assert signer.held is not None
        assert signer.held["seq"] == 6
    finally:
        buf.close()


@pytest.fixture
def provisioned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    folder = tmp_path / "fleet"
    assert main(["provision", "init", str(folder), "--broker-user", "nobody-here"]) == 0
    assert main(["provision", "vehicle", str(folder), A, "--buffer",
                 str(tmp_path / "buffer.sqlite")]) == 0
    capsys.readouterr()
    return folder


def test_the_uplink_signs_each_minute_while_nothing_can_be_sent(provisioned: Path) -> None:
    """The broker is away (the uplink never connected): records recorded still get a checkpoint
    within a minute of the agent's clock, held until it can be sent."""
    config = load_config(provisioned / "vehicles" / A / "agent.toml")
    up = Uplink(config)  # not started: not connected
    try:
        assert up.checkpoints is not None
        clock = FakeClock()
        up.checkpoints.clock = clock
        up.checkpoints.signed_at = clock.now
        up.buffer.add([("registrador", speed(A, n)) for n in range(1, 11)])
        up._round()
        assert up.checkpoints.held is None
        clock.now += 61
        up._round()
        held = up.checkpoints.held
        assert held is not None
        assert held["seq"] == 10
        assert up.stats.batches_sent == 0  # nothing went out
        cert = identity.load_cert_file(provisioned / "vehicles" / A / "signing.crt")
        assert checkpoint_valid(identity.public_key_of(cert), A, up.agent, Checkpoint(
            10, str(held["hash"]), str(held["key"]), str(held["sig"])))
    finally:
        up.buffer.close()


def test_the_collector_keeps_a_checkpoint_sent_alone(provisioned: Path) -> None:
    """A batch with no records and the timer's checkpoint: kept, answered with nothing, and it
    covers the records when they arrive (before or after it)."""
    config = load_config(provisioned / "vehicles" / A / "agent.toml")
    up = Uplink(config)
    store = open_store(str(provisioned / "collector.db"))
    try:
        assert up.checkpoints is not None
        recs = [("registrador", speed(A, n)) for n in range(1, 6)]
        up.buffer.add(recs)
        cp = up.checkpoints.sign_newest(5, up.buffer.hashes([5])[5])
        bodies = [body for _, body in up.buffer.pending(0, 10)]
        ingest = Ingest(store, lambda: frozenset({A}))
        topic = f"frota/v1/{A}/up"
        alone = ingest.handle(topic, encode_batch(A, up.agent, [], checkpoint=cp))
        assert alone is not None
        assert (alone[1].stored, alone[1].rejected, alone[1].conflicts) == ([], [], [])
        assert store._read("SELECT seq FROM checkpoints") == [(5,)]
        records = [json.loads(body) for body in bodies]
        answer = ingest.handle(topic, encode_batch(A, up.agent, records))
        assert answer is not None
        assert answer[1].stored == [(1, 5)]
        verifier = ChainVerifier(store, provisioned / "ca.crt", provisioned / "keyring.json")
        assert verifier.run_once() == 0
        keyring = load_keyring(provisioned / "keyring.json",
                               identity.load_cert_file(provisioned / "ca.crt"))
        report = check_store(store, keyring)
        assert report.problems == []
        assert report.checkpoints_good == 1
    finally:
        store.close()
        up.buffer.close()
