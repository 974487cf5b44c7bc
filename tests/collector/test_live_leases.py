"""Several collectors, one fleet, the rules split by partition (issue 16 item 2): two ``frota
collector run`` processes on one PostgreSQL schema share ingest (``broker.share_group``) and the
live rules' partitions (one per operator) under leases (collector/live_leases.py). One is
SIGKILLed mid-run: every record is stored once, the survivor takes the dead one's partitions
over when their leases run out, and every partition ends evaluated up to the last record, its
findings those of ``frota check --as-of`` on the stored records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from collector import findings, store_live
from collector import registry as fleet
from collector.live_rules import SETTLE_MAX_MS, LiveRules
from collector.partitions import FLEET, partition_names
from collector.rules.profile import load_profiles
from collector.store import open_store
from frota.harness import CollectorProcess, Mosquitto, free_port, frota_argv
from frota.harness.postgres import private_schema
from protocols.records import ms_to_ts, ts_to_ms
from simulators.fleet import registry, vehicle_ids
from tests.services import PROJECT

VEHICLES = 6
RATE_HZ = 10.0
DURATION_S = 8.0
LEASE_S = 6
AZUL, VERDE = "Viação Azul", "Expresso Verde"
#: Two operators of two buses each, two buses without one (the partition ``fleet``).
OPERATORS = {v: AZUL if i < 2 else VERDE if i < 4 else None
             for i, v in enumerate(vehicle_ids(VEHICLES))}
STORE_ONLY = "~store"


def _fleet() -> dict[str, Any]:
    doc = registry(VEHICLES)
    for vehicle in doc["vehicles"]:
        if OPERATORS[vehicle["id"]] is not None:
            vehicle["operator"] = OPERATORS[vehicle["id"]]
    return doc


@pytest.fixture
def schema_dsn(postgres_dsn: str) -> Iterator[tuple[str, str]]:
    """A fresh schema: (the DSN the collectors use, the schema's name)."""
    with private_schema(postgres_dsn) as made:
        yield made


def _collector(folder: Path, broker: str, dsn: str, name: str) -> CollectorProcess:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fleet.json").write_text(json.dumps(_fleet()), encoding="utf-8")
    port = free_port()
    (folder / "collector.toml").write_text(
        'registry = "fleet.json"\n'
        f'[broker]\nurl = "{broker}"\nclient_id = "collector-{name}"\nshare_group = "frota"\n'
        f'[database]\ndsn = "{dsn}"\n'
        f'[http]\nhost = "127.0.0.1"\nport = {port}\n'
        f"[findings]\nlease_s = {LEASE_S}\n",
        encoding="utf-8",
    )
    return CollectorProcess(folder / "collector.toml", port)


def _query(dsn: str, schema: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        conn.execute(f"SET search_path TO {schema}".encode())
        return conn.execute(sql.encode()).fetchall()


def _wait(what: str, done: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


def test_two_collectors_split_the_partitions_and_one_killed_is_taken_over(
    mosquitto: Mosquitto, schema_dsn: tuple[str, str], postgres_dsn: str, tmp_path: Path
) -> None:
    dsn, schema = schema_dsn
    reg_path = tmp_path / "fleet.json"
    reg_path.write_text(json.dumps(_fleet()), encoding="utf-8")
    reg = fleet.load(reg_path)
    parts = [*partition_names(reg), STORE_ONLY]
    assert sorted(parts) == sorted([FLEET, f"operator:{VERDE}", f"operator:{AZUL}", STORE_ONLY])
    first = _collector(tmp_path / "a", mosquitto.url, dsn, "a")
    second = _collector(tmp_path / "b", mosquitto.url, dsn, "b")
    first.start()
    second.start()

    def holders() -> dict[str, str]:
        return {str(p): str(h).split("@")[0] for p, h in _query(
            postgres_dsn, schema, "SELECT part, holder FROM live_leases")}

    argv = frota_argv("sim", "fleet", "--vehicles", str(VEHICLES), "--rate", str(RATE_HZ),
                      "--duration", str(DURATION_S), "--broker", mosquitto.url,
                      "--ack-timeout", "3", "--drain", "60", "--json")
    with (tmp_path / "sim.log").open("w") as log:
        sim = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        # two of the four partitions each (ceil(4 / 2 collectors))
        _wait("both collectors hold two partitions", lambda: sorted(
            holders().values()) == ["collector-a"] * 2 + ["collector-b"] * 2, 60)
        os.kill(first.pid, signal.SIGSTOP)      # mid-batch, then dead
        time.sleep(2)
        first.stop(signal.SIGKILL)
        out, _ = sim.communicate(timeout=180)
        report = json.loads(out.strip().splitlines()[-1])
        expected = int(VEHICLES * RATE_HZ * DURATION_S)
        assert report["created"] == report["stored"] == expected
        rows = _query(postgres_dsn, schema, "SELECT vehicle, seq FROM records")
        assert sorted(rows) == sorted((v, s) for v in vehicle_ids(VEHICLES)
                                      for s in range(1, int(RATE_HZ * DURATION_S) + 1))
        # the survivor takes the dead collector's partitions once their leases run out, and
        # evaluates every partition up to the last record
        _wait("the survivor holds every partition",
              lambda: holders() == dict.fromkeys(parts, "collector-b"))
        newest = int(_query(postgres_dsn, schema, "SELECT max(id) FROM records")[0][0])
        _wait("every partition judged up to the last record", lambda: all(
            int(v) >= newest for _, v in _query(
                postgres_dsn, schema, "SELECT name, value FROM findings_state "
                f"WHERE name LIKE '{store_live.LAST_ID}:%'")) and len(_query(
                    postgres_dsn, schema, "SELECT name FROM findings_state "
                    f"WHERE name LIKE '{store_live.LAST_ID}:%'")) == 3)
    finally:
        if sim.poll() is None:
            sim.kill()
        second.stop()
        if first.proc is not None:
            first.stop(signal.SIGKILL)
    assert holders() == {}                      # a clean stop gives the leases back

    # Each partition's tail checkpoint is at most the settling delay before its last record
    # (collector/live_rules.py, Settling): evaluated from it, only the records from its boundary
    # on are read again; nothing arrived, so every record is settled (as_of is a minute after
    # the last): the state kept in memory has processed them all, and the next evaluation feeds
    # none again.
    store = open_store(dsn)
    try:
        recs = [json.loads(text) for v in store.vehicle_ids() for text in store.records(v)]
        last_ms = max(ts_to_ms(r["ts"]) for r in recs)
        as_of = last_ms + 60_000
        live_rules = LiveRules(store, reg, reg_path.read_bytes(), load_profiles())
        done = live_rules.evaluate(as_of, as_of)
        again = live_rules.evaluate(as_of, as_of)
        for name in (FLEET, f"operator:{AZUL}", f"operator:{VERDE}"):
            mine = [r for r in recs if (f"operator:{OPERATORS[r['vehicle']]}"
                                        if OPERATORS[r["vehicle"]] else FLEET) == name]
            top = max(ts_to_ms(r["ts"]) for r in mine)
            boundary = done.boundaries[name]
            assert boundary is not None
            assert top - SETTLE_MAX_MS <= boundary <= top + 1   # (just after it: all settled)
            assert done.replayed[name] == sum(1 for r in mine if ts_to_ms(r["ts"]) >= boundary)
            assert again.replayed[name] == 0
        live = findings.load(store)
    finally:
        store.close()
    file = tmp_path / "records.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    checked = subprocess.run([sys.executable, "-m", "frota", "check", "--registry", str(reg_path),
                              "--as-of", ms_to_ts(as_of), str(file)], cwd=PROJECT,
                             capture_output=True, text=True, timeout=300, check=True)
    expected_findings = [json.loads(line) for line in checked.stdout.splitlines()]
    # the store-only rules (the survivor's evaluation) aside
    assert [f for f in live[0] if f["rule"] not in ("retention.minimum",
                                                    "equipment.integrity")] == expected_findings
    assert live[1] == as_of
