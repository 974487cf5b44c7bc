"""The FMS source on a real pseudo-terminal, read with python-can's slcan interface: listen-only,
garbage counted, unplugged/silent like the serial sources, doors left to RS-485 counters, and the
time the agent was down recorded as a gap."""

from __future__ import annotations

import configparser
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config import ConfigError, parse_config
from agent.sources import make_source
from agent.sources.base import StateHooks
from agent.sources.fms import FmsSource
from agent.timekeeper import TimeKeeper
from protocols.fms import FmsDecoder, Tco1, encode_dc2, encode_tco1, encode_td, slcan, speed_code
from protocols.records import Record, ms_to_ts
from tests.agent.devices import Device
from tests.agent.helpers import T0_MS, VEHICLE, wait_until
from tests.agent.test_sources import Collected, device
from tests.services import PROJECT

pytestmark = pytest.mark.pty


class Adapter(Device):
    """An SLCAN adapter on a bus: each tick one device second — TD, DC2, then TCO1 at 36 km/h.

    It keeps the commands the host sent (python-can's set-up) and, while ``garbage`` is set,
    sends a line that is no frame before the frames.
    """

    def __init__(self, link: Path) -> None:
        self.second = 0
        self.commands: list[str] = []
        self.garbage = threading.Event()
        self.doors = (True, True)
        super().__init__(link)

    def tick(self) -> None:
        """One device second of traffic."""
        inbox = self.port.read()
        if inbox:
            self.commands += [c.decode("ascii", "replace") for c in inbox.split(b"\r") if c]
        self.second += 1
        at = T0_MS + self.second * 1000
        frames = [encode_td(at), encode_dc2(*self.doors),
                  encode_tco1(Tco1(VehicleMotion=1, TachographVehicleSpeed=speed_code(36.0)))]
        data = b"".join(slcan.encode_frame(f) for f in frames)
        if self.garbage.is_set():
            data = b"T18FEZZ\r\xfe\xff\r" + data
        self.port.write(data)


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    """The agent's stop event, set after the test."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def adapter(tmp_path: Path) -> Iterator[Adapter]:
    """The adapter on a pty."""
    talker = Adapter(tmp_path / "can")
    yield talker
    talker.close()


def fms(path: str, sink: Collected, stop: threading.Event, **kwargs: object) -> FmsSource:
    """The FMS source for ``path`` (python-can, listen-only, no wait after opening)."""
    source = make_source(device("tacho", "fms", path, open_wait_s=0), VEHICLE, sink, TimeKeeper(),
                         stop, **kwargs)  # type: ignore[arg-type]
    assert isinstance(source, FmsSource)
    return source


def test_reads_listen_only_and_counts_garbage(adapter: Adapter, stop: threading.Event) -> None:
    sink = Collected()
    source = fms(adapter.path, sink, stop)
    tapped: list[bytes] = []
    source.taps = (lambda _ms, data: tapped.append(data),)  # frota agent capture
    source.start()
    assert wait_until(lambda: len(sink.of("speed")) >= 5)
    speeds = sink.of("speed")
    # What a capture gets is SLCAN text the FMS decoder reads back.
    assert FmsDecoder(VEHICLE).feed(b"".join(tapped))
    assert {r["kmh"] for r in speeds} == {36.0}
    assert all(r["ts"].startswith("2026-03-02T14:0") for r in speeds)  # the TD's time, not the Pi's
    adapter.garbage.set()
    assert wait_until(lambda: source.garbage >= 4)
    adapter.garbage.clear()
    before = len(sink.of("speed"))
    assert wait_until(lambda: len(sink.of("speed")) >= before + 3)  # frames still read
    assert source.fms.stats.malformed == source.garbage
    # Opened listen-only (L), never in normal mode (O), never a frame sent (t/T/r/R).
    assert "L" in adapter.commands
    assert not [c for c in adapter.commands if c[0] in "OtTrR"], adapter.commands
    assert sink.statuses("registrador") == []  # no line trouble


def test_unplugged_and_silent_are_reported_like_a_serial_device(
    adapter: Adapter, stop: threading.Event
) -> None:
    sink = Collected()
    source = fms(adapter.path, sink, stop)
    source.start()
    assert wait_until(lambda: len(sink.of("speed")) >= 3)
    with adapter.lock:
        adapter.port.unplug()
    assert wait_until(lambda: sink.statuses("registrador") == ["disconnected"])
    with adapter.lock:
        adapter.port.open()
    assert wait_until(lambda: sink.statuses("registrador") == ["disconnected", "ok"])
    adapter.talking.clear()  # the bus falls silent, the adapter stays
    assert wait_until(lambda: sink.statuses("registrador")[-1:] == ["silent"])
    adapter.talking.set()
    assert wait_until(lambda: sink.statuses("registrador") == ["disconnected", "ok", "silent", "ok"])
    # After each gap frames wait for the next TD: every speed record is on the tachograph's
    # whole second (the time carried over a gap would not be the tachograph's).
    assert all(int(r["ts"][20:23]) < 100 for r in sink.of("speed")), sink.of("speed")


def test_doors_counted_on_rs485_are_left_to_the_counters(
    adapter: Adapter, stop: threading.Event
) -> None:
    sink = Collected()
    source = fms(adapter.path, sink, stop, counted_doors=frozenset({1}))
    source.start()
    assert wait_until(lambda: len(sink.of("speed")) >= 3 and sink.of("door"))
    assert {r["door"] for r in sink.of("door")} == {2}


def test_the_time_the_agent_was_down_is_a_gap_record(adapter: Adapter, stop: threading.Event) -> None:
    sink = Collected()
    saved: list[str] = []
    last = ms_to_ts(T0_MS - 3_600_000)  # committed an hour of device time before this start

    def save(_source: str, records: list[Record], state: str) -> None:
        saved.append(state)
        sink("tacho", records)

    hooks = StateHooks(save=save, load=lambda: json.dumps({"last_ts": last}), resume=lambda: None)
    source = fms(adapter.path, sink, stop, state=hooks)
    source.start()
    assert wait_until(lambda: len(sink.of("speed")) >= 2)
    gap, back = (r for r in sink.of("device"))
    assert (gap["status"], gap["ts"], gap["device"]) == ("disconnected", last, "registrador")
    assert "agent was not running" in gap["detail"]
    assert "gone" in gap["detail"]
    assert back["status"] == "ok"
    # Each batch commits the time of its last record: where the next gap would start.
    assert json.loads(saved[-1])["last_ts"] == max(r["ts"] for r in sink.of("speed"))


def test_can_keys_belong_to_fms_devices_only() -> None:
    base = {"vehicle": "V", "buffer": {"path": "b.sqlite"}, "broker": {"url": "mqtt://x"}}
    ok = parse_config({**base, "devices": [
        {"name": "can", "protocol": "fms", "port": "can0", "interface": "socketcan"}]})
    assert (ok.devices[0].interface, ok.devices[0].device) == ("socketcan", "registrador")
    bad = [
        ({"name": "g", "protocol": "nmea", "port": "p", "interface": "slcan"},
         "devices[0].interface: only fms devices"),
        ({"name": "c", "protocol": "fms", "port": "can0", "interface": "socketcan",
          "bitrate": 250000}, "devices[0].bitrate: a socketcan link's bit rate"),
        ({"name": "c", "protocol": "fms", "port": "p", "bitrate": 300000}, "devices[0].bitrate:"),
    ]
    for dev, message in bad:
        with pytest.raises(ConfigError) as caught:
            parse_config({**base, "devices": [dev]})
        assert str(caught.value).startswith(message), caught.value


def test_the_shipped_network_file_brings_can0_up_listen_only_at_250k() -> None:
    parser = configparser.ConfigParser()
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep the keys' case
    parser.read(PROJECT / "firmware-notes" / "systemd" / "80-can0.network")
    assert dict(parser["Match"]) == {"Name": "can0"}
    assert dict(parser["CAN"]) == {"BitRate": "250K", "ListenOnly": "yes"}
