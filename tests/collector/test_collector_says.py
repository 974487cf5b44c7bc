"""The collector says what is wrong (issue 14): a broker that is down or goes away, named in the
log with its reason and in /health; an HTTP port in use refused before anything else starts.
Real processes: ``frota collector run``, a private Mosquitto."""

from __future__ import annotations

import select
import socket
import subprocess
import time
from pathlib import Path

import pytest

from frota.harness import CollectorProcess, HarnessError, frota_argv, write_collector_files
from tests.collector.helpers import FLEET
from tests.services import PROJECT, Mosquitto, free_port

pytestmark = [pytest.mark.mosquitto]


def _wait_log(collector: CollectorProcess, text: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while text not in collector.child.log_text():
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never logged: {collector.child.log_text()}")
        time.sleep(0.05)
    return collector.child.log_text()


def test_a_broker_that_is_down_is_named_with_its_reason_and_backoff(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    url = f"mqtt://127.0.0.1:{port}"
    config, http = write_collector_files(tmp_path, url, FLEET)
    collector = CollectorProcess(config, http)
    collector.start(wait_connected=False)
    try:
        body = collector.wait_health(503)
        while body["broker"]["reason"] is None:  # /health answers before the first attempt ends
            time.sleep(0.05)
            body = collector.wait_health(503)
        assert body["broker"] == {"connected": False, "since": None, "reason": "connection refused"}
        # paho's backoff: 1 s after the first failure, then 2 s.
        _wait_log(collector, f"cannot connect to broker {url}: connection refused (retrying in 1 s)")
        log = _wait_log(collector, f"cannot connect to broker {url}: connection refused (retrying in 2 s)")
    finally:
        assert collector.stop() == 0
    assert "Traceback" not in log


def test_a_broker_that_goes_away_is_named_not_an_unspecified_error(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    config, http = write_collector_files(tmp_path, mosquitto.url, FLEET)
    collector = CollectorProcess(config, http)
    collector.start()
    try:
        mosquitto.stop()
        body = collector.wait_health(503)
        assert body["broker"]["reason"] == "connection closed by the broker"
        _wait_log(collector, f"disconnected from broker {mosquitto.url}: connection closed by the broker")
        mosquitto.start()  # the same port: the collector finds it again by itself
        collector.wait_health(200, timeout=60)
        log = collector.child.log_text()
    finally:
        assert collector.stop() == 0
    assert "Unspecified error" not in log
    assert "Traceback" not in log


def test_an_http_port_in_use_is_refused_before_the_broker_and_the_database(tmp_path: Path) -> None:
    with socket.socket() as taken, socket.socket() as broker:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        http_port = taken.getsockname()[1]
        broker.bind(("127.0.0.1", 0))  # a "broker" that only counts who knocks
        broker.listen()
        url = f"mqtt://127.0.0.1:{broker.getsockname()[1]}"
        config, _ = write_collector_files(tmp_path, url, FLEET, http_port=http_port)
        done = subprocess.run(frota_argv("collector", "run", "--config", str(config)), cwd=PROJECT,
                              capture_output=True, text=True, timeout=60)
        knocked, _, _ = select.select([broker], [], [], 0.5)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"frota collector: error: http: cannot listen on 127.0.0.1:{http_port}: "
                           "the port is already in use (another collector running? change "
                           "http.port)\n")
    assert knocked == []  # never connected to the broker
    assert not (tmp_path / "collector.db").exists()  # never created the database


def test_the_harness_names_a_collector_that_died(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config, port = write_collector_files(tmp_path, "mqtt://127.0.0.1:1", FLEET,
                                             http_port=taken.getsockname()[1])
        collector = CollectorProcess(config, port)
        with pytest.raises(HarnessError, match=r"the collector stopped \(exit status 1\).*already in use"):
            collector.start(wait_connected=False)
