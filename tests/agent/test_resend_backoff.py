"""Resends back off while the collector does not answer, and start over when it does.

The waits (agent/flights.py): ``ack_timeout_s`` first, then doubled per round of unanswered
resends up to ``resend_max_s``, each drawn in [half, all] of it; any ack resets them.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from agent.buffer import Buffer
from agent.flights import Flights, ResendBackoff
from agent.uplink import Uplink
from tests.agent.helpers import VEHICLE, config, speed, wait_until
from tests.agent.responder import Responder
from tests.services import Mosquitto


def test_the_wait_doubles_per_round_of_misses_up_to_the_cap_and_resets() -> None:
    backoff = ResendBackoff(1.0, 8.0, random.Random(7))
    assert backoff.wait() == 1.0  # nothing missed yet: ack_timeout_s exactly
    # ceiling = 1 × 2^misses, capped at 8: 2, 4, 8, 8; each wait in [ceiling / 2, ceiling]
    for attempt, ceiling in enumerate((2.0, 4.0, 8.0, 8.0)):
        backoff.missed(attempt)
        assert backoff.ceiling() == ceiling
        waits = [backoff.wait() for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert max(waits) - min(waits) > ceiling / 4  # jittered, not one value
    backoff.missed(3)  # a batch of the same round again: counts once
    assert backoff.misses == 4
    backoff.missed(1000)  # no overflow however long the collector stays away
    assert backoff.ceiling() == 8.0
    backoff.reset()
    assert backoff.wait() == 1.0


def test_flights_are_late_only_past_their_wait_and_an_answer_resets_the_backoff() -> None:
    flights = Flights(ResendBackoff(10.0, 100.0, random.Random(1)))
    flights.sent({1, 2, 3}, "backlog", now=0.0)
    flights.sent({4, 5}, "live", now=5.0)
    assert flights.late(now=9.9) == []
    late = flights.late(now=10.0)  # the first batch's 10 s are over, not the second's
    assert [f.seqs for f in late] == [{1, 2, 3}]
    assert flights.backoff.misses == 1
    flights.sent({1, 2, 3}, "resend", attempt=1, now=10.0)  # a wait in [10, 20] s
    resent = max(flights.batches.values(), key=lambda f: f.sent_at)
    assert 20.0 <= resent.due <= 30.0
    flights.answered([(4, 5), (1, 2)])
    assert flights.backoff.misses == 0
    assert [f.seqs for f in flights.batches.values()] == [{3}]
    assert flights.seqs() == {3}


def test_a_new_connection_starts_the_waits_over() -> None:
    flights = Flights(ResendBackoff(10.0, 100.0, random.Random(2)))
    flights.backoff.missed(2)  # three rounds unanswered: the ceiling is 80 s
    flights.sent({1}, "resend", attempt=3, now=0.0)  # due in [40, 80] s
    flights.sent({2}, "live", now=0.0)
    flights.reconnected(now=5.0)
    assert flights.backoff.misses == 0
    assert [f.due for f in flights.batches.values()] == [15.0, 15.0]  # 5 + 10 at the latest
    assert flights.late(now=14.9) == []
    assert len(flights.late(now=15.0)) == 2


@pytest.mark.mosquitto
@pytest.mark.slow
def test_a_silent_collector_gets_fewer_and_fewer_resends_then_everything_when_it_answers(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    # A collector that receives but does not answer (overloaded): it notes when each batch
    # arrives through the real broker. One batch of 10 records is in flight.
    arrivals: list[float] = []
    silent = threading.Event()
    silent.set()

    def received(_n: int) -> bool:
        arrivals.append(time.monotonic())
        return silent.is_set()  # True: the batch is dropped, no answer

    resp = Responder(mosquitto.port, drop=received)
    first, cap = 0.5, 4.0
    cfg = config(tmp_path, mosquitto.url, batch_records=100, ack_timeout_s=first,
                 resend_max_s=cap)
    buf = Buffer(cfg.buffer.path)
    buf.add([("reg", speed(i, device_seq=i)) for i in range(10)])
    agent = buf.agent
    buf.close()
    assert wait_until(lambda: resp.client.is_connected())
    up = Uplink(cfg)
    up.start()
    try:
        # The first send and five resends (generous time-out: a loaded machine is only slower).
        assert wait_until(lambda: len(arrivals) >= 6, timeout=120.0)
        # The waits between them are at least: 0.5 (ack_timeout_s), then half of 1, 2, 4, 4
        # (the ceiling doubles per unanswered round, capped at 4; the draw is >= half of it).
        # Without the backoff the five gaps would be 5 × 0.5 = 2.5 s. The arrivals are seen
        # through the broker, whose delivery time varies: a margin of 0.5 s.
        least = first + (1.0 + 2.0 + 4.0 + 4.0) / 2
        assert arrivals[5] - arrivals[0] >= least - 0.5
        assert up.stats.resent_batches >= 5
        assert up._flights.backoff.misses >= 4
        silent.clear()  # the collector recovers: the next resend is answered
        assert wait_until(lambda: up.backlog() == 0, timeout=60.0)
        assert wait_until(lambda: up._flights.backoff.misses == 0)  # the answer reset the waits
    finally:
        up.stop()
        resp.close()
    assert sorted(resp.records) == [(VEHICLE, agent, s) for s in range(1, 11)]
