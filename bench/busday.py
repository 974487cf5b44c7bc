"""Realistic records of one bus: registrador status at 1 Hz, GPS at 1 Hz, door counts at stops.

Built by encoding real frames and sentences and decoding them with the project's own decoders,
so sizes (``raw`` hex included) are those the agent really buffers and sends.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from protocols.apc import ApcDecoder, DoorCounts, encode_counts, encode_request
from protocols.records import Record, ms_to_ts, ts_to_ms
from protocols.registrador.encoder import Slot, encode_status
from protocols.registry import get

VEHICLE = "ABC1D23"
T0_MS = 1_772_460_000_000  # 2026-03-02T14:00:00.000Z


@functools.cache
def _checksum(body: str) -> str:
    value = 0
    for char in body.encode():
        value ^= char
    return f"{value:02X}"


def _rmc_gga(ms: int, n: int) -> bytes:
    ts = ms_to_ts(ms)
    hhmmss = ts[11:13] + ts[14:16] + ts[17:19]
    ddmmyy = ts[8:10] + ts[5:7] + ts[2:4]
    lat = f"23{30 + (n // 60000) % 20:02d}.{n % 60000 // 60:04d}"
    rmc = f"GPRMC,{hhmmss}.00,A,{lat},S,04637.5120,W,{40 + n % 40:.1f},{n % 360:.1f},{ddmmyy},,,A"
    gga = f"GPGGA,{hhmmss}.00,{lat},S,04637.5120,W,1,09,0.9,760.0,M,-3.0,M,,"
    return f"${rmc}*{_checksum(rmc)}\r\n${gga}*{_checksum(gga)}\r\n".encode()


def bus_records(seconds: int, vehicle: str = VEHICLE) -> Iterator[tuple[str, Record]]:
    """(source, record) of ``seconds`` of one bus, in time order; ~2 records per second."""
    reg = get("registrador").make_decoder(vehicle)
    gps = get("nmea").make_decoder(vehicle)
    apc = ApcDecoder(vehicle)
    driver = Slot("04512345678", "drive")
    entered = [0, 0, 0, 0]
    for n in range(1, seconds + 1):
        ms = T0_MS + n * 1000
        stopped = (n // 600) % 10 == 0 and n % 600 < 60  # a 1-minute stop every 100 minutes
        frame = encode_status(
            n, ms, kmh=0.0 if stopped else float(60 + n % 30), odometer_m=n * 22,
            ignition=True, slot1=driver,
        )
        for rec in reg.feed(frame):
            yield "registrador", rec
        for rec in gps.feed(_rmc_gga(ms, n)):
            yield "gps", rec
        if stopped and n % 15 == 0:  # doors polled: open at the stop, counts moving
            for address in (1, 2, 3, 4):
                entered[address - 1] += 3
                is_open = n % 600 < 45
                reply = encode_counts(address, DoorCounts(is_open, entered[address - 1], n % 7))
                for rec in apc.feed(encode_request(address) + reply, ms):
                    yield "doors", rec


def day_of_records(n: int = 175_000, hour_s: int = 3600) -> list[tuple[str, Record]]:
    """About ``n`` records of one bus (24 h ≈ 175,000).

    One hour is encoded and decoded for real; later hours repeat it with ``ts`` and
    ``device_seq`` shifted (their ``raw`` is the first hour's: same sizes, and decoding 175,000
    frames through construct would take most of a minute before the benchmark even starts).
    """
    hour = list(bus_records(seconds=hour_s))
    out: list[tuple[str, Record]] = []
    shift = 0
    while len(out) < n:
        for source, rec in hour:
            copy = dict(rec)
            copy["ts"] = ms_to_ts(ts_to_ms(rec["ts"]) + shift * 1000)
            if "device_seq" in copy:
                copy["device_seq"] = rec["device_seq"] + shift
            out.append((source, copy))
            if len(out) >= n:
                break
        shift += hour_s
    return out
