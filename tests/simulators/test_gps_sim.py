"""The GPS simulator: its sentences decode to what it was told, and it runs on a real pty."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import serial

from protocols.nmea import NmeaDecoder, parse_sentence
from protocols.records import Record, ms_to_ts, ts_to_ms, validate
from simulators.gps import GpsFix, GpsReceiver, RouteDriver, epoch_sentences
from simulators.scenario.geo import haversine_m
from tests.services import PROJECT

T0 = ts_to_ms("2026-03-02T14:23:05.000Z")


def decode(data: bytes) -> tuple[list[Record], NmeaDecoder]:
    decoder = NmeaDecoder("SIM")
    out = decoder.feed(data) + decoder.finish()
    for rec in out:
        validate(rec)
    return out, decoder


def test_sentences_decode_to_the_fix() -> None:
    fix = GpsFix(-23.5163, -46.6252, kmh=90.0, course=271.3)
    sentences = epoch_sentences(T0, fix)
    assert [s[3:6] for s in sentences] == [b"RMC", b"VTG", b"GGA"]
    for sentence in sentences:
        assert sentence.endswith(b"\r\n")
        assert parse_sentence(sentence[:-2]).valid  # the checksum is right
    out, _ = decode(b"".join(sentences))
    assert len(out) == 1
    rec = out[0]
    assert rec["ts"] == "2026-03-02T14:23:05.000Z"
    assert rec["lat"] == pytest.approx(-23.5163, abs=1e-6)
    assert rec["lon"] == pytest.approx(-46.6252, abs=1e-6)
    assert rec["kmh"] == pytest.approx(90.0, abs=0.01)
    assert rec["course"] == pytest.approx(271.3)


def test_void_fix_gives_void_sentences() -> None:
    out, decoder = decode(b"".join(epoch_sentences(T0, GpsFix(0, 0, valid=False))))
    assert out == []
    assert decoder.stats.void_fixes == 2


def test_route_driver_moves_stops_and_turns_back() -> None:
    driver = RouteDriver(T0, route=[(-23.0, -46.0), (-23.0, -46.01)], kmh=72.0,
                         stop_every_s=20, stop_for_s=5)
    a, b = driver(T0), driver(T0 + 10_000)
    assert haversine_m((a.lat, a.lon), (b.lat, b.lon)) == pytest.approx(200.0, rel=1e-3)  # 20 m/s
    stopped = driver(T0 + 22_000)
    assert stopped.kmh == 0.0
    assert stopped.course is None
    assert driver(T0 + 24_000).lon == stopped.lon
    # the segment is ~1023 m; at 76 s it has driven 3 x 20 + 1 = 61 s = 1220 m: on its way back
    back = driver(T0 + 76_000)
    assert back.course == pytest.approx(90.0, abs=0.1)


def test_receiver_emits_one_epoch_per_device_second() -> None:
    receiver = GpsReceiver(T0 - 1, RouteDriver(T0), talker="GN", vtg=False)
    emissions = receiver.due(T0 + 2_500)
    assert receiver.epochs == 3
    assert all(e.data.startswith(b"$GN") for e in emissions)
    out, _ = decode(b"".join(e.data for e in emissions))
    assert [r["ts"] for r in out] == [ms_to_ts(T0 + i * 1000) for i in range(3)]


def read_sim(args: list[str], seconds: float) -> tuple[list[Record], NmeaDecoder]:
    """Run ``frota sim gps ARGS`` and decode what its pty sends for a while."""
    with subprocess.Popen(
        [sys.executable, "-m", "frota", "sim", "gps", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=PROJECT,
    ) as proc:
        assert proc.stdout is not None
        path = proc.stdout.readline().strip()
        decoder = NmeaDecoder("SIM")
        out: list[Record] = []
        try:
            with serial.Serial(path, 9600, timeout=0.2) as port:
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline and proc.poll() is None:
                    try:
                        out += decoder.feed(port.read(4096))
                    except serial.SerialException:
                        break  # the simulator ended and closed its side
        finally:
            proc.terminate()
            proc.wait(10)
        out += decoder.finish()
    for rec in out:
        validate(rec)
    return out, decoder


@pytest.mark.pty
def test_frota_sim_gps_on_a_pty_across_midnight() -> None:
    out, decoder = read_sim(
        ["--time-scale", "4", "--baud", "0", "--duration", "8", "--talker", "GN",
         "--start", "2026-03-02T23:59:57Z"], seconds=10)
    stamps = [ts_to_ms(r["ts"]) for r in out]
    assert len(stamps) >= 4
    assert stamps[0] == ts_to_ms("2026-03-02T23:59:58Z")
    assert stamps == list(range(stamps[0], stamps[0] + 1000 * len(stamps), 1000))
    assert ts_to_ms("2026-03-03T00:00:00Z") in stamps
    assert decoder.stats.crc_failures == 0


@pytest.mark.pty
def test_frota_sim_gps_with_line_noise_decodes_what_survives() -> None:
    out, decoder = read_sim(
        ["--time-scale", "10", "--baud", "0", "--duration", "30", "--garbage", "0.05",
         "--ber", "0.002", "--seed", "7", "--start", "2026-03-02T14:00:00Z"], seconds=5)
    start = ts_to_ms("2026-03-02T14:00:00Z")
    assert out, decoder.stats.summary()
    for rec in out:
        assert (ts_to_ms(rec["ts"]) - start) % 1000 == 0
        assert 0 < ts_to_ms(rec["ts"]) - start <= 31_000
    assert decoder.stats.bytes_dropped + decoder.stats.crc_failures > 0
