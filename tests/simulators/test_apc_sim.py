"""The door-counter simulator: answers polls like the protocol says, and its counts add up on a pty."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import serial

from frota.cli import main
from protocols.apc import ACK_RESET, DoorCounts, Poller, encode_ack, encode_counts, encode_request
from protocols.apc.frames import COUNTS_SIZE, HEADER_SIZE, parse_counts
from protocols.records import Record, validate
from simulators.apc import DoorSensor, SensorBus, StopCycle
from tests.services import PROJECT

ANSWER_SIZE = HEADER_SIZE + COUNTS_SIZE + 2


def answers(bus: SensorBus, data: bytes) -> bytes:
    return b"".join(e.data for e in bus.receive(data, 0))


def test_heads_answer_their_address_only() -> None:
    bus = SensorBus([DoorSensor(1), DoorSensor(2, open=True, entered=70000, exited=3)])
    # a head powers up with the counter-reset flag latched
    assert answers(bus, encode_request(1)) == encode_counts(1, DoorCounts(False, 0, 0, counter_reset=True))
    assert answers(bus, encode_request(3)) == b""  # nobody there
    assert answers(bus, encode_request(0)) == b""  # broadcast: no answer
    # 70000 goes out as 70000 - 65536 = 4464 on the wire
    reply = answers(bus, encode_request(2))
    assert parse_counts(reply[HEADER_SIZE:-2]).entered == 4464
    assert answers(bus, encode_request(2, ACK_RESET)) == encode_ack(2)
    assert bus.sensors[2].counter_reset is False


def test_split_and_garbled_requests() -> None:
    bus = SensorBus([DoorSensor(1)])
    request = encode_request(1)
    assert answers(bus, b"\x00\xff" + request[:3]) == b""
    assert len(answers(bus, request[3:])) == ANSWER_SIZE
    bad = request[:-1] + bytes([request[-1] ^ 1])
    assert answers(bus, bad + request) == encode_counts(1, DoorCounts(False, 0, 0, counter_reset=True))
    # another head's answer on the shared line is not a request
    assert answers(bus, encode_counts(1, DoorCounts(False, 5, 5))) == b""


def test_reset_latches_the_flag_and_counts_resets() -> None:
    head = DoorSensor(4, entered=10, exited=9, counter_reset=False)
    head.reset()
    assert head.counts() == DoorCounts(False, 0, 0, counter_reset=True, resets=1)


def test_stop_cycle_opens_counts_and_closes() -> None:
    heads = {1: DoorSensor(1), 2: DoorSensor(2)}
    cycle = StopCycle(0, every_s=10, dwell_s=4, per_stop=20, seed=1)
    cycle.advance(9_999, heads)
    assert not heads[1].open
    cycle.advance(10_000, heads)
    assert heads[1].open
    assert heads[2].open
    cycle.advance(14_000, heads)
    assert not heads[1].open
    passed = sum(h.entered + h.exited for h in heads.values())
    assert 0 <= passed <= 20
    # --help: "Every --stop-every device seconds the doors open": the next stop opens at 20 s
    # (10 s after this one opened), not 10 s after it closed.
    assert cycle.next_ms == 20_000
    cycle.advance(19_999, heads)
    assert not heads[1].open
    cycle.advance(20_000, heads)
    assert heads[1].open


def test_a_dwell_as_long_as_the_stop_interval_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Doors open every --stop-every seconds: a dwell that long would never let them close.
    assert main(["sim", "apc", "--stop-every", "30", "--dwell", "30"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--dwell (30) must be shorter than --stop-every (30)" in err


def poll(path: str, addresses: list[int], seconds: float) -> tuple[list[Record], Poller]:
    """The agent's side by hand: poll in turn, feed request and answer to the decoder."""
    poller = Poller("SIM", addresses)
    out: list[Record] = []
    t0_ms = 1_772_461_385_000  # the decoder is given its time (door heads have no clock)
    start = time.monotonic()
    with serial.Serial(path, 19_200, timeout=0.02) as port:
        while time.monotonic() - start < seconds:
            request = poller.next_request()
            try:
                port.write(request)
                reply = b""
                deadline = time.monotonic() + 0.2
                while len(reply) < ANSWER_SIZE and time.monotonic() < deadline:
                    reply += port.read(ANSWER_SIZE - len(reply))
                    if request[2] == ACK_RESET and len(reply) >= HEADER_SIZE + 2:
                        break
            except serial.SerialException:
                break  # the simulator ended
            now_ms = t0_ms + int((time.monotonic() - start) * 1000)
            out += poller.feed(request + reply, now_ms)
    out += poller.decoder.finish()
    for rec in out:
        validate(rec)
    return out, poller


@pytest.mark.pty
def test_frota_sim_apc_counts_add_up_through_a_pty(tmp_path: Path) -> None:
    sent = tmp_path / "sent.jsonl"
    with subprocess.Popen(
        [sys.executable, "-m", "frota", "sim", "apc", "--doors", "2", "--first-address", "3",
         "--stop-every", "3", "--dwell", "2", "--per-stop", "8", "--seed", "5",
         "--time-scale", "4", "--duration", "40", "--sent-log", str(sent)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=PROJECT,
    ) as proc:
        assert proc.stdout is not None
        path = proc.stdout.readline().strip()
        try:
            records, poller = poll(path, [3, 4], seconds=3)  # stops before the simulator
        finally:
            proc.terminate()
            proc.wait(10)
    doors = [r for r in records if r["kind"] == "door"]
    assert {r["door"] for r in doors} == {3, 4}
    for door in (3, 4):
        # state changes (finish() may add one more with the state unchanged and no raw)
        states = [r["open"] for r in doors if r["door"] == door and "raw" in r]
        assert len(states) >= 2
        assert all(a != b for a, b in itertools.pairwise(states))  # open, close, …
    assert poller.decoder.stats.crc_failures == 0
    # Totals: what the decoder reported equals the last answer minus the first, per head.
    answered: dict[int, list[DoorCounts]] = {}
    for line in sent.read_text().splitlines():
        frame = bytes.fromhex(json.loads(line)["hex"])
        if frame[2] != 0x81:
            continue  # an ACK_RESET answer
        answered.setdefault(frame[1], []).append(parse_counts(frame[HEADER_SIZE:-2]))
    heard = {3, 4}
    for address in heard:
        first, last = answered[address][0], answered[address][-1]
        mine = [r for r in doors if r["door"] == address]
        # apc.md: a first answer with the reset flag up (heads power up so) counts from 0
        base = DoorCounts(False, 0, 0) if first.counter_reset else first
        assert sum(r["boarded"] for r in mine) == last.entered - base.entered
        assert sum(r["alighted"] for r in mine) == last.exited - base.exited
    assert sum(r["boarded"] + r["alighted"] for r in doors) > 0
