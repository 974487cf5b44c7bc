"""``frota sim fleet`` (issue 16 item 3): N agents on the wire against a real collector."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from frota.cli import main
from frota.harness import CollectorProcess, Mosquitto, write_collector_files
from simulators.fleet import FleetReport, registry, vehicle_ids
from simulators.fleet_report import phases
from tests.services import PROJECT
from tests.trust.fleet import running_fleet


def _sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frota", "sim", "fleet", *args], cwd=PROJECT,
                          capture_output=True, text=True, timeout=180)


def test_percentiles_are_nearest_rank() -> None:
    report = FleetReport(vehicles=1, duration_s=1.0, latencies_ms=[40.0, 10.0, 30.0, 20.0])
    # nearest rank: ceil(n * p / 100) of the sorted values 10, 20, 30, 40
    assert report.percentile(50) == 20.0  # rank 2
    assert report.percentile(90) == 40.0  # rank ceil(3.6) = 4
    assert report.percentile(1) == 10.0  # rank ceil(0.04) = 1
    assert FleetReport(1, 1.0).percentile(50) is None


def test_registry_names_the_simulated_buses(tmp_path: Path) -> None:
    assert vehicle_ids(3) == ["SIM00001", "SIM00002", "SIM00003"]
    out = tmp_path / "fleet.json"
    done = _sim("--vehicles", "2", "--write-registry", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == registry(2)


@pytest.mark.parametrize("args", [["--vehicles", "0"], ["--rate", "0"], ["--duration", "nan"],
                                  ["--broker", "http://x"], ["--provisioned", "/nonexistent"]])
def test_bad_options_are_one_line_errors(args: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "fleet", *args]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_few_buses_for_a_few_seconds_all_stored_once(mosquitto: Mosquitto,
                                                        tmp_path: Path) -> None:
    config, port = write_collector_files(tmp_path / "c", mosquitto.url, registry(3))
    collector = CollectorProcess(config, port)
    collector.start()
    try:
        done = _sim("--vehicles", "3", "--rate", "4", "--duration", "3", "--broker",
                    mosquitto.url, "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        body = collector.wait_health(200)
    finally:
        collector.stop()
    assert report["created"] == report["stored"] == 3 * 4 * 3
    assert report["unanswered"] == report["rejected"] == report["conflicts"] == 0
    assert len(report["latency_ms"]) == 4
    assert report["latency_ms"]["p50"] <= report["latency_ms"]["p99"] <= report["latency_ms"]["max"]
    assert {v: h["stored"] for v, h in body["vehicles"].items()} == dict.fromkeys(vehicle_ids(3), 12)
    # every record named by the collector's evaluation notices (stored and evaluated)
    assert (report["evaluated"], report["unevaluated"]) == (36, 0)
    assert report["notices"] >= 1
    assert report["evaluated_ms"]["p50"] <= report["evaluated_ms"]["max"]
    # where the time went: every phase, and no record waited more than the batch interval
    # (1 s) for its bus's batch to be due
    phases = report["phases_ms"]
    assert set(phases) == {"batch_wait", "sim_late", "sent_to_stored", "stored_to_as_of",
                           "as_of_to_notice"}
    assert 0 <= phases["batch_wait"]["p50"] <= phases["batch_wait"]["p99"] <= 1000
    assert len(report["notice_lag_ms"]) == report["notices"]


def test_two_worker_processes_share_the_fleet(mosquitto: Mosquitto, tmp_path: Path) -> None:
    config, port = write_collector_files(tmp_path / "c", mosquitto.url, registry(5))
    collector = CollectorProcess(config, port)
    collector.start()
    try:
        done = _sim("--vehicles", "5", "--rate", "2", "--duration", "2", "--broker",
                    mosquitto.url, "--workers", "2", "--sign", "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        body = collector.wait_health(200)
    finally:
        collector.stop()
    # 5 buses x 2 Hz x 2 s, split 3 + 2 over the workers, each bus once
    assert report["vehicles"] == 5
    assert report["created"] == report["stored"] == report["evaluated"] == 20
    assert {v: h["stored"] for v, h in body["vehicles"].items()} == dict.fromkeys(vehicle_ids(5), 4)


def test_provisioned_buses_sign_and_the_store_verifies() -> None:
    """With --provisioned: each bus's own broker credentials (TLS, no anonymous access) and
    signed checkpoints, which ``frota verify`` checks against the fleet's keys."""
    with running_fleet() as fleet:
        url = fleet.broker.fleet.broker_url
        done = _sim("--provisioned", str(fleet.folder), "--vehicles", "2", "--rate", "5",
                    "--duration", "2", "--broker", url, "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["created"] == report["stored"] == 20
        verify = subprocess.run(
            [sys.executable, "-m", "frota", "verify", "--config",
             str(fleet.folder / "collector.toml")],
            cwd=PROJECT, capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_the_phases_of_the_slowest_records_add_up_to_their_latency() -> None:
    """Each record's phases add up to its latency; the slowest 1 % are the ones with the largest
    total (here the last of 200: 1 % of 200 is 2 records, the two slowest)."""
    rows = [(float(10 * i), float(i), 0.0, float(4 * i), float(2 * i), float(3 * i))
            for i in range(200)]
    got = phases(rows)
    assert got["batch_wait"]["slowest_1pct_mean"] == (198 + 199) / 2
    assert got["sent_to_stored"]["slowest_1pct_mean"] == 4 * (198 + 199) / 2
    assert got["as_of_to_notice"]["p50"] == 3 * 99      # nearest rank: the 100th of 200
    assert phases([]) == {}
