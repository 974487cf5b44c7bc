"""The collector's answers as the agent applies them: bound to content, signed, and never able to
stop the uplink. Forged and malformed acks go over a real Mosquitto to a real uplink."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.acks import AckGate
from collector.signer import AckSigner
from protocols import identity
from protocols.uplink import Ack, PayloadError, ack_topic, decode_ack, encode_ack
from tests.agent.helpers import wait_until
from tests.trust.broker import connected, provisioned_broker
from tests.trust.fleet import A, B, capture, running_fleet, speed, uplink


@pytest.mark.mosquitto
def test_forged_and_malformed_acks_change_nothing_and_never_stop_the_uplink() -> None:
    with provisioned_broker((A,)) as running:
        from agent.config import load_config

        folder = running.fleet.folder
        config = load_config(folder / "vehicles" / A / "agent.toml")
        capture(config, [speed(A, n) for n in range(1, 7)])
        collector = folder / "collectors" / "main"
        genuine = AckSigner(collector / "signing.key", collector / "signing.crt", folder / "ca.crt")
        with uplink(config) as up, connected(running, "collector-main") as thief:
            agent = up.agent
            own = up.buffer.hashes(range(1, 7))
            topic = ack_topic(A)
            # The agent subscribes once connected: an ack for another agent id, sent until the
            # agent has counted one, shows that it now receives what is published here.
            other = encode_ack(Ack(agent="someone-else"))
            for _ in range(200):
                thief.publish(topic, other)
                if wait_until(lambda: up.gate.counters.other_agent > 0, timeout=0.1):
                    break
            assert up.gate.counters.other_agent > 0
            # 1. malformed: a seq that is no integer (it once killed paho's thread for good)
            thief.publish(topic, json.dumps({"schema": 2, "agent": agent,
                                             "stored": [[1e999, 1]]}).encode())
            thief.publish(topic, b'{"schema": 2, "agent": "' + agent.encode() + b'", "stored": '
                          + b"[" * 50_000 + b"]" * 50_000 + b"}")
            # 2. right hashes, no signature
            unsigned = Ack(agent=agent, stored=[(1, 3)], vehicle=A)
            unsigned.hashes = {3: own[3]}
            thief.publish(topic, encode_ack(unsigned))
            # 3. signed by a collector key no fleet CA of ours certified
            ca_key, ca_cert = identity.make_ca("someone else's CA")
            other_key = identity.new_signing_key()
            other_cert = identity.certify_signing_key(ca_key, ca_cert, "main", "collector",
                                                      other_key.public_key())
            (folder / "other.key").write_bytes(identity.private_pem(other_key))
            (folder / "other.crt").write_bytes(identity.cert_pem(other_cert))
            (folder / "other-ca.crt").write_bytes(identity.cert_pem(ca_cert))
            impostor = AckSigner(folder / "other.key", folder / "other.crt", folder / "other-ca.crt")
            thief.publish(topic, encode_ack(impostor.sign(unsigned)))
            # 4. the genuine collector's signature over hashes that are not what A sent
            wrong = Ack(agent=agent, stored=[(4, 6)], vehicle=A)
            wrong.hashes = {6: own[5]}
            thief.publish(topic, encode_ack(genuine.sign(wrong)))
            # 5. the genuine answer for 1-3: applied (so everything before it was read)
            right = Ack(agent=agent, stored=[(1, 3)], vehicle=A)
            right.hashes = {3: own[3]}
            thief.publish(topic, encode_ack(genuine.sign(right)))
            assert wait_until(lambda: up.buffer.counts().stored == 3)
            counts = up.buffer.counts()
            assert (counts.stored, counts.pending) == (3, 3)
            gate = up.gate.counters
            assert gate.bad_payloads == 2
            assert gate.bad_signatures == 2
            assert gate.unbound_entries == 1
            assert up.alive  # the send loop and paho's network thread
            network = up.client._thread
            assert isinstance(network, threading.Thread)
            assert network.is_alive()


@pytest.mark.mosquitto
@pytest.mark.slow
def test_retryable_final_and_conflict_answers_leave_the_documented_buffer_states() -> None:
    with running_fleet(registered=(A,)) as fleet:
        # B is provisioned but not in the registry: unknown vehicle, retryable
        b = fleet.agent_config(B)
        capture(b, [speed(B, 1)])
        with uplink(b) as up:
            assert wait_until(lambda: up.buffer.counts().rejected == 1)
        row = sqlite3.connect(b.buffer.path).execute(
            "SELECT state, retryable, reason FROM records").fetchone()
        assert row[:2] == (2, 1)
        assert row[2].startswith("unknown vehicle")
        # a record the contract refuses: final
        a = fleet.agent_config(A)
        capture(a, [speed(A, 1), {**speed(A, 2), "kmh": -1.0}])
        with uplink(a) as up:
            assert wait_until(lambda: up.buffer.counts().rejected == 1)
            assert wait_until(lambda: up.buffer.counts().stored == 1)
        rows = sqlite3.connect(a.buffer.path).execute(
            "SELECT seq, s.state, retryable FROM records JOIN record_states s USING (seq) "
            "ORDER BY seq").fetchall()
        assert rows == [(1, 1, 0), (2, 2, 0)]


def test_decode_ack_refuses_what_is_not_an_ack() -> None:
    agent = '"schema": 2, "agent": "a1"'
    for bad in ('"stored": [[1e999, 1]]', '"stored": [[0, 1, null]]', '"stored": [[3, 1, null]]',
                '"stored": [[1.0, 2.0]]', '"stored": [[true, 2]]', '"stored": [[1, 9007199254740992]]',
                '"stored": [[1, 2, "nothex"]]', '"rejected": [{"first": 1, "last": 2}]',
                '"rejected": [{"first": 1, "last": 2, "reason": "x", "retryable": "yes"}]',
                '"conflicts": [[1]]', '"stored": {}', '"sig": 5'):
        with pytest.raises(PayloadError):
            decode_ack(("{" + agent + ", " + bad + "}").encode())


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(stored=_json, rejected=_json, conflicts=_json, extra=_json)
def test_an_ack_of_any_shape_is_an_ack_or_a_payload_error(
    stored: object, rejected: object, conflicts: object, extra: object
) -> None:
    obj = {"schema": 2, "agent": "a1", "stored": stored, "rejected": rejected,
           "conflicts": conflicts, "sig": extra}
    try:
        payload = json.dumps(obj).encode()
    except ValueError:
        return
    try:
        ack = decode_ack(payload)
    except PayloadError:
        return
    for first, last in ack.stored + [(a, b) for a, b, _ in ack.rejected]:
        assert type(first) is int
        assert type(last) is int
        assert 1 <= first <= last <= 2**53 - 1


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_the_agents_gate_never_raises(payload: bytes) -> None:
    gate = AckGate("a1", None)
    assert gate.read("frota/v1/ABC1D23/ack", payload) is None or True


def test_the_watchdog_condition_covers_pahos_network_thread(tmp_path: Path) -> None:
    from agent.uplink import Uplink
    from tests.agent.helpers import config

    up = Uplink(config(tmp_path))  # a broker that is not there: paho keeps retrying
    up.start()
    try:
        assert wait_until(lambda: up.alive)
        up.client.loop_stop()  # paho's thread ends, as it would on an escaped exception
        assert wait_until(lambda: not up.alive)
    finally:
        up.stop()
