"""The HTTP API over a real socket (uvicorn on a free port): /health and /records, their 404s and
bad input."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from collector.config import BrokerConfig
from collector.http import make_app
from collector.ingest import Ingest
from collector.store import open_store, record_row
from protocols.records import ms_to_ts
from protocols.uplink import encode_batch
from tests.collector.helpers import T0, VEHICLES, AgentSide, speed
from tests.services import Mosquitto, serve_app

V1, V2 = VEHICLES


@dataclass
class Api:
    """A running API and its ingest."""

    base: str
    ingest: Ingest


def _serve(tmp_path: Path, broker_url: str | None) -> Iterator[Api]:
    store = open_store(str(tmp_path / "collector.db"))
    # stored earlier (by a previous run): out of order on purpose
    rows = [record_row(speed(V1, "a1", seq), T0) for seq in (3, 1, 2)]
    store.put(rows, (), [(V1, T0 + 3000, T0 + 5000, "a1")])
    ingest = Ingest(store, lambda: frozenset(VEHICLES))
    if broker_url is not None:
        ingest.connect(BrokerConfig(url=broker_url, client_id="http-test"))
    app = make_app(ingest, lambda: frozenset(VEHICLES), stale_after_s=60)
    try:
        with serve_app(app) as base:
            yield Api(base, ingest)
    finally:
        ingest.close()
        store.close()


@pytest.fixture
def offline_api(tmp_path: Path) -> Iterator[Api]:
    """The API of a collector that has no broker connection."""
    yield from _serve(tmp_path, None)


@pytest.fixture
def online_api(tmp_path: Path, mosquitto: Mosquitto) -> Iterator[Api]:
    """The API of a collector connected to the private broker."""
    yield from _serve(tmp_path, mosquitto.url)


def test_health_is_503_without_the_broker_and_shows_what_is_stored(offline_api: Api) -> None:
    response = httpx.get(offline_api.base + "/health")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "broker disconnected"
    assert body["broker"]["connected"] is False
    assert body["rejects"] == 0
    assert set(body["vehicles"]) == set(VEHICLES)  # the registry's, even never heard from
    v1 = body["vehicles"][V1]
    assert v1["agent"] == "a1"
    assert v1["latest_record_ts"] == "2026-03-02T14:10:03.000Z"
    assert v1["last_received"] == "2026-03-02T14:10:05.000Z"
    assert v1["lag_s"] > 0
    assert body["vehicles"][V2]["status"] == "unknown"
    assert body["vehicles"][V2]["latest_record_ts"] is None


@pytest.mark.mosquitto
def test_health_is_200_when_connected_with_lag_and_status(
    online_api: Api, mosquitto: Mosquitto
) -> None:
    deadline = time.monotonic() + 20
    while httpx.get(online_api.base + "/health").status_code != 200:
        assert time.monotonic() < deadline, "never connected"
        time.sleep(0.05)
    agent = AgentSide(mosquitto.port)
    try:
        agent.client.publish(
            f"frota/v1/{V2}/status",
            json.dumps({"schema": 1, "vehicle": V2, "agent": "b1", "status": "online"}),
            qos=1,
            retain=True,
        ).wait_for_publish(10)
        agent.publish(V2, encode_batch(V2, "b1", [speed(V2, "b1", 1, at_s=0)]))
        agent.wait_ack(V2)
        while True:
            body = httpx.get(online_api.base + "/health", params={"vehicle": V2}).json()
            if body["vehicles"][V2]["status"] == "online":
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.05)
    finally:
        agent.close()
    assert body["status"] == "ok"
    assert list(body["vehicles"]) == [V2]
    v2 = body["vehicles"][V2]
    assert (v2["agent"], v2["batches"], v2["stored"], v2["acks"]) == ("b1", 1, 1, 1)
    assert v2["latest_record_ts"] == ms_to_ts(T0)


def test_health_of_an_unknown_vehicle_is_404(offline_api: Api) -> None:
    response = httpx.get(offline_api.base + "/health", params={"vehicle": "NOPE"})
    assert response.status_code == 404
    assert response.json() == {"detail": "unknown vehicle 'NOPE'"}


def test_health_with_a_bad_vehicle_id_is_400(offline_api: Api) -> None:
    response = httpx.get(offline_api.base + "/health", params={"vehicle": "a/+"})
    assert response.status_code == 400
    assert response.json()["detail"].startswith("query vehicle: String should match pattern")


def test_records_are_json_lines_in_ts_seq_order(offline_api: Api) -> None:
    response = httpx.get(
        offline_api.base + "/records",
        params={"vehicle": V1, "since": "2026-03-02T14:10:02Z", "until": "2026-03-02T11:10:04-03:00"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = response.text.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [2, 3]


def test_records_of_an_unknown_vehicle_is_404(offline_api: Api) -> None:
    response = httpx.get(
        offline_api.base + "/records", params={"vehicle": "NOPE", "since": "2026-03-02T00:00:00Z"}
    )
    assert response.status_code == 404
    assert response.json() == {"detail": "unknown vehicle 'NOPE'"}


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"vehicle": V1, "since": "yesterday"}, "query since: 'yesterday' is not an RFC 3339 timestamp"),
        (
            {"vehicle": V1, "since": "2026-03-02T00:00:00Z", "until": "2026-03-02T00:00:00"},
            "query until: '2026-03-02T00:00:00' is not an RFC 3339 timestamp",
        ),
        ({"vehicle": V1}, "query since: Field required"),
    ],
)
def test_records_with_bad_input_is_400(
    offline_api: Api, params: dict[str, str], detail: str
) -> None:
    response = httpx.get(offline_api.base + "/records", params=params)
    assert response.status_code == 400
    assert response.json() == {"detail": detail}


def test_an_unknown_route_is_404(offline_api: Api) -> None:
    response = httpx.get(offline_api.base + "/nothing-here")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}


def test_no_route_deletes_records(offline_api: Api) -> None:
    for path in ("/records?vehicle=ABC1D23&since=2026-03-02T00:00:00Z",
                 "/vehicles/ABC1D23/days/2026-03-02"):
        response = httpx.delete(offline_api.base + path, timeout=5)
        assert response.status_code == 405
        assert "deleted only by frota collector prune" in response.json()["detail"]
        assert "art. 61 §3" in response.json()["detail"]
    assert offline_api.ingest.store.count("ABC1D23") == 3
