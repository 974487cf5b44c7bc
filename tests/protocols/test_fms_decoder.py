"""FmsDecoder on frame sequences: not-available and error values, BAM losses, TD policies, doors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import can

from protocols.fms import (
    CanFrame,
    FmsDecoder,
    Tco1,
    encode_dc1,
    encode_dc2,
    encode_di,
    encode_tco1,
    encode_td,
    encode_vdhr,
    speed_code,
)
from protocols.fms.decoder import HOLD_FRAMES, HOLD_SECONDS
from protocols.fms.frames import FrameLike
from protocols.fms.messages import encode_signals
from protocols.records import ms_to_ts, validate
from tests.protocols.fms_vectors import DRIVER1, DRIVER2, TD_MS

T0 = TD_MS - 750  # 2026-03-02T14:05:30.000Z
DRIVING = Tco1(Driver1WorkingState=3, Driver2WorkingState=1, VehicleMotion=1, Driver1Card=1,
               Driver2Card=1, TachographVehicleSpeed=speed_code(80))


def at(rx: float | None, frame: CanFrame) -> CanFrame:
    return replace(frame, timestamp=rx)


def run(frames: Sequence[FrameLike], decoder: FmsDecoder | None = None) -> tuple[list[dict[str, Any]], FmsDecoder]:
    decoder = decoder or FmsDecoder("ABC1D23")
    records: list[dict[str, Any]] = []
    for frame in frames:
        records += decoder.frame(frame)
    records += decoder.finish()
    for record in records:
        validate(record)
    return records, decoder


def kinds(records: list[dict[str, Any]]) -> list[str]:
    return [r["kind"] for r in records]


def tco1s(start: float, count: int, values: Tco1 = DRIVING, step: float = 0.05) -> list[CanFrame]:
    return [at(start + i * step, encode_tco1(values)) for i in range(count)]


# --- 1 Hz sampling ---------------------------------------------------------------------------------


def test_twenty_hz_becomes_one_hz() -> None:
    records, decoder = run([at(0.0, encode_td(T0)), *tco1s(0.0, 60)])  # 3 s of TCO1
    speeds = [r for r in records if r["kind"] == "speed"]
    assert [r["ts"] for r in speeds] == [ms_to_ts(T0 + s * 1000) for s in range(3)]
    assert decoder.stats.summary()["sampled_out"] == 57


def test_a_stop_is_reported_at_once() -> None:
    stopped = replace(DRIVING, VehicleMotion=0, TachographVehicleSpeed=0)
    frames = [at(0.0, encode_td(T0)), *tco1s(0.0, 5), *tco1s(0.25, 2, stopped)]
    records, _ = run(frames)
    speeds = [(r["ts"], r["kmh"]) for r in records if r["kind"] == "speed"]
    assert speeds == [(ms_to_ts(T0), 80.0), (ms_to_ts(T0 + 250), 0.0)]


def test_speed_reaching_zero_while_motion_says_moving_is_a_stop() -> None:
    crawl = replace(DRIVING, TachographVehicleSpeed=0)  # motion still 1
    records, _ = run([at(0.0, encode_td(T0)), *tco1s(0.0, 2), at(0.1, encode_tco1(crawl))])
    assert [r["kmh"] for r in records if r["kind"] == "speed"] == [80.0, 0.0]


# --- not available and error values ----------------------------------------------------------------


def test_speed_not_available_gives_no_speed_record() -> None:
    na = replace(DRIVING, TachographVehicleSpeed=0xFF00)
    records, decoder = run([at(0.0, encode_td(T0)), *tco1s(0.0, 3, na)])
    assert "speed" not in kinds(records)
    assert decoder.stats.summary()["not_available"] == 3
    assert kinds(records) == ["driver", "driver"]


def test_speed_error_is_a_device_fault_once_then_ok() -> None:
    bad = replace(DRIVING, TachographVehicleSpeed=0xFE00)
    records, _ = run([at(0.0, encode_td(T0)), *tco1s(0.0, 3, bad), *tco1s(0.15, 1)])
    devices = [(r["status"], r["detail"]) for r in records if r["kind"] == "device"]
    assert devices == [("fault", "TCO1: tachograph vehicle speed error"),
                       ("ok", "TCO1 cleared: tachograph vehicle speed error")]


def test_error_values_and_events_are_named() -> None:
    bad = replace(DRIVING, Driver1WorkingState=6, Driver2Card=2, SystemEvent=1,
                  HandlingInformation=1, VehicleMotion=2, DirectionIndicator=2)
    records, _ = run([at(0.0, encode_td(T0)), *tco1s(0.0, 2, bad)])
    details = [r["detail"] for r in records if r["kind"] == "device"]
    assert details == sorted(details)
    assert {d.removeprefix("TCO1: ") for d in details} == {
        "driver 1 working state error", "driver 2 card error", "vehicle motion error",
        "direction indicator error",
        "system event (time adjustment, security breach, power or sensor fault)",
        "handling information (e.g. no card while driving, printer)",
    }
    drivers = [(r["slot"], r["activity"], r["driver"], r.get("card")) for r in records
               if r["kind"] == "driver"]
    assert drivers == [(1, "unknown", None, True), (2, "available", None, None)]


def test_vdhr_not_available_drops_the_odometer() -> None:
    frames = [at(0.0, encode_td(T0)), at(0.0, encode_vdhr(1000)), *tco1s(0.0, 1),
              at(0.5, encode_vdhr(None)), *tco1s(1.0, 1)]
    records, decoder = run(frames)
    assert [r.get("odometer_m") for r in records if r["kind"] == "speed"] == [1000, None]
    assert decoder.stats.summary()["not_available"] == 1


def test_short_and_fd_frames_are_malformed_not_raised() -> None:
    short = CanFrame(0.0, 0x0CFE6CEE, True, b"\x00\x01")
    fd = CanFrame(0.0, 0x0CFE6CEE, True, bytes(12))
    standard = CanFrame(0.0, 0x123, False, bytes(8))
    records, decoder = run([at(0.0, encode_td(T0)), short, fd, standard])
    assert records == []
    assert decoder.stats.malformed == 2
    assert decoder.stats.summary()["foreign"] == 1


def test_python_can_messages_and_their_error_frames() -> None:
    td = encode_td(T0)
    tco1 = encode_tco1(DRIVING)
    messages = [
        can.Message(timestamp=5.0, arbitration_id=td.arbitration_id, data=td.data),
        can.Message(timestamp=5.1, arbitration_id=0x20000080, is_error_frame=True, data=bytes(8)),
        can.Message(timestamp=5.1, arbitration_id=tco1.arbitration_id, is_remote_frame=True),
        can.Message(timestamp=5.2, arbitration_id=tco1.arbitration_id, data=bytearray(tco1.data)),
    ]
    records, decoder = run(messages)
    assert kinds(records) == ["speed", "driver", "driver"]
    assert records[0]["ts"] == ms_to_ts(T0 + 200)
    assert decoder.stats.summary()["error_frames"] == 2


def test_invalid_td_does_not_move_the_clock() -> None:
    td = encode_td(T0)
    bad_day = replace(td, data=td.data[:4] + b"\x00" + td.data[5:])  # day code 0
    feb31 = replace(td, data=encode_signals(0xFEE6, {"Seconds": 0, "Minutes": 0, "Hours": 0,
                                                     "Month": 2, "Day": 31 * 4, "Year": 41}))
    records, decoder = run([at(0.0, bad_day), at(0.0, feb31), at(0.1, td), *tco1s(0.2, 1)])
    assert records[0]["ts"] == ms_to_ts(T0 + 100)
    assert decoder.stats.summary()["not_available"] == 2


# --- drivers ---------------------------------------------------------------------------------------


def test_card_without_di_then_di_then_withdrawal() -> None:
    no_card = replace(DRIVING, Driver1Card=0, Driver1WorkingState=0)
    frames = [at(0.0, encode_td(T0)), *tco1s(0.0, 1),
              *[at(0.2, f) for f in encode_di(DRIVER1, DRIVER2)],
              *tco1s(0.3, 1, no_card), *tco1s(0.4, 1)]
    records, _ = run(frames)
    slot1 = [(r["driver"], r["activity"], r.get("card")) for r in records
             if r["kind"] == "driver" and r["slot"] == 1]
    # The card re-inserted at 0.4 is not the DI's old driver: null with card: true until a DI.
    assert slot1 == [(None, "drive", True), (DRIVER1, "drive", None), (None, "rest", None),
                     (None, "drive", True)]


def test_card_presence_not_available_trusts_di() -> None:
    na = replace(DRIVING, Driver1Card=3, Driver2Card=3)
    frames = [at(0.0, encode_td(T0)), *[at(0.0, f) for f in encode_di(DRIVER1, None)],
              *tco1s(0.1, 1, na)]
    records, _ = run(frames)
    drivers = [(r["slot"], r["driver"], r.get("card")) for r in records if r["kind"] == "driver"]
    assert drivers == [(1, DRIVER1, None), (2, None, None)]


def test_single_frame_di_and_bad_di() -> None:
    bad = CanFrame(0.3, 0x18FE6BEE, True, b"\x80\x81*\xff\xff\xff\xff\xff")
    frames = [at(0.0, encode_td(T0)), *tco1s(0.1, 1), at(0.2, encode_di("77", None)[0]), bad]
    records, decoder = run(frames)
    assert [(r["slot"], r["driver"]) for r in records if r["kind"] == "driver"][-1] == (1, "77")
    assert decoder.stats.malformed == 1


# --- BAM -------------------------------------------------------------------------------------------


def _bam(start: float, source: int = 0xEE) -> list[CanFrame]:
    frames = encode_di(DRIVER1, DRIVER2, source=source)
    return [replace(f, timestamp=start + i * 0.05) for i, f in enumerate(frames)]


def _ids(records: list[dict[str, Any]]) -> list[str | None]:
    return [r["driver"] for r in records if r["kind"] == "driver"]


def test_bam_lost_packet_is_incomplete_and_the_next_transfer_completes() -> None:
    first = _bam(0.2)
    del first[2]
    records, decoder = run([at(0.0, encode_td(T0)), *tco1s(0.1, 1), *first, *_bam(0.6)])
    assert _ids(records) == [None, None, DRIVER1, DRIVER2]
    assert (decoder.stats.summary()["bam_incomplete"], decoder.stats.summary()["bam_complete"]) == (1, 1)


def test_bam_lost_last_packet_times_out() -> None:
    first = _bam(0.2)[:-1]
    late = at(2.0, encode_di(DRIVER1, DRIVER2)[-1])  # the last packet 1.8 s after: past T1
    records, decoder = run([at(0.0, encode_td(T0)), *tco1s(0.1, 1), *first, late])
    assert _ids(records) == [None, None]
    assert decoder.stats.summary()["bam_incomplete"] == 1
    assert decoder.stats.summary()["bam_orphans"] == 1


def test_bam_out_of_order_and_repeated_packets() -> None:
    cm, p1, p2, p3, p4 = _bam(0.2)
    bad_repeat = replace(p2, data=p2.data[:1] + b"XXXXXXX")
    records, decoder = run([at(0.0, encode_td(T0)), *tco1s(0.1, 1),
                            cm, p3, p1, p1, p2, bad_repeat, p4])
    assert _ids(records)[-2:] == [DRIVER1, DRIVER2]
    assert decoder.stats.summary()["bam_duplicates"] == 1
    assert decoder.stats.summary()["bam_complete"] == 1


def test_bam_interleaved_sources() -> None:
    a = _bam(0.2, source=0xEE)
    b = _bam(0.21, source=0x17)  # another unit's DI (e.g. a second tachograph gateway)
    mixed = [f for pair in zip(a, b, strict=True) for f in pair]
    records, decoder = run([at(0.0, encode_td(T0)), *tco1s(0.1, 1), *mixed])
    assert decoder.stats.summary()["bam_complete"] == 2
    assert _ids(records)[-2:] == [DRIVER1, DRIVER2]


def test_bam_orphans_and_connection_mode_and_bad_announcement() -> None:
    cm, p1, *_ = _bam(0.2)
    rts = replace(cm, data=b"\x10" + cm.data[1:])  # RTS: connection mode
    to_one = replace(cm, arbitration_id=0x1CEC17EE)  # a BAM addressed to one unit
    bad_size = replace(cm, data=b"\x20\x05\x00\x01\xff\x6b\xfe\x00")  # 5 bytes: not a BAM size
    records, decoder = run([at(0.0, encode_td(T0)), p1, rts, to_one, bad_size])
    assert records == []
    assert decoder.stats.summary()["bam_orphans"] == 1
    assert decoder.stats.summary()["connection_mode"] == 2
    assert decoder.stats.summary()["bam_malformed"] == 1


def test_bam_open_at_the_end_is_incomplete() -> None:
    _, decoder = run([at(0.0, encode_td(T0)), *_bam(0.2)[:3]])
    assert decoder.stats.summary()["bam_incomplete"] == 1


# --- time ------------------------------------------------------------------------------------------


def test_frames_before_the_first_td_are_held_and_dated_backwards() -> None:
    records, decoder = run([*tco1s(0.0, 1), at(0.3, encode_td(T0))])
    assert records[0]["ts"] == ms_to_ts(T0 - 300)
    assert decoder.stats.summary()["undated"] == 0


def test_without_receive_stamps_frames_take_the_nearest_td() -> None:
    records, _ = run([at(None, encode_tco1(DRIVING)), at(None, encode_td(T0)),
                      at(None, encode_tco1(replace(DRIVING, VehicleMotion=0)))])
    assert {r["ts"] for r in records} == {ms_to_ts(T0)}


def test_td_absent_without_an_estimate_counts_undated() -> None:
    frames = tco1s(0.0, int(HOLD_SECONDS * 20) + 40)
    records, decoder = run(frames)
    assert records == []
    # The first speed and both slots; with no time there is no new second to sample, and
    # nothing else changed.
    assert decoder.stats.summary()["undated"] == 3
    assert decoder.td_absent


def test_td_absent_uses_the_consumers_estimate() -> None:
    decoder = FmsDecoder("ABC1D23")
    decoder.set_time(T0)
    records, _ = run(tco1s(0.0, int(HOLD_SECONDS * 20) + 2), decoder)
    assert records
    assert {r["ts"] for r in records} == {ms_to_ts(T0)}
    assert decoder.stats.summary()["estimated"] == len(records)


def test_hold_overflow_without_receive_stamps() -> None:
    records, decoder = run([at(None, encode_dc2(i % 2 == 0, None)) for i in range(HOLD_FRAMES + 1)])
    assert records == []
    assert decoder.stats.summary()["undated"] == HOLD_FRAMES + 1


def test_a_td_after_absence_takes_over() -> None:
    frames = [*tco1s(0.0, int(HOLD_SECONDS * 20) + 2), at(11.0, encode_td(T0)),
              at(11.5, encode_tco1(replace(DRIVING, VehicleMotion=0, TachographVehicleSpeed=0)))]
    records, _ = run(frames)
    assert [(r["kind"], r["ts"]) for r in records] == [("speed", ms_to_ts(T0 + 500))]


def test_forget_time_holds_frames_until_the_next_td() -> None:
    decoder = FmsDecoder("ABC1D23")
    first = decoder.frame(at(0.0, encode_td(T0))) + decoder.frame(at(0.1, encode_tco1(DRIVING)))
    assert first[0]["ts"] == ms_to_ts(T0 + 100)
    decoder.forget_time()
    stopped = replace(DRIVING, VehicleMotion=0, TachographVehicleSpeed=0)
    assert decoder.frame(at(30.0, encode_tco1(stopped))) == []  # held
    later = decoder.frame(at(30.5, encode_td(T0 + 60_000)))
    # Dated backwards from the new TD, and no clock_jump: there was no time to jump from.
    assert [(r["kind"], r["ts"]) for r in later] == [("speed", ms_to_ts(T0 + 59_500))]


def test_clock_jump() -> None:
    frames = [at(0.0, encode_td(T0)), at(1.0, encode_td(T0 + 1000)),
              at(2.0, encode_td(T0 + 3_600_000)), *tco1s(2.1, 1)]
    records, _ = run(frames)
    assert [(r["kind"], r.get("status"), r["ts"]) for r in records][:1] == [
        ("device", "clock_jump", ms_to_ts(T0 + 3_600_000))]
    assert records[0]["detail"].startswith("TD moved +3598.000 s")
    assert records[1]["ts"] == ms_to_ts(T0 + 3_600_100)


def test_a_receive_clock_step_is_not_a_tachograph_jump() -> None:
    frames = [at(0.0, encode_td(T0)), at(3600.0, encode_td(T0 + 1000)), *tco1s(3600.1, 1)]
    records, decoder = run(frames)
    assert "device" not in kinds(records)
    assert decoder.stats.summary()["receive_steps"] == 1
    assert records[0]["ts"] == ms_to_ts(T0 + 1100)


# --- doors -----------------------------------------------------------------------------------------


def test_dc1_alone_gives_door_zero_until_dc2() -> None:
    frames = [at(0.0, encode_td(T0)), at(0.1, encode_dc1(2)), at(0.2, encode_dc1(0)),
              at(0.3, encode_dc1(1)), at(0.4, encode_dc1(2)), at(0.5, encode_dc1(15)),
              at(0.6, encode_dc2(None, True)), at(0.7, encode_dc1(0)), at(0.8, encode_dc2(None, False))]
    records, decoder = run(frames)
    assert [(r["door"], r["open"]) for r in records] == [
        (0, False), (0, True), (0, False), (2, True), (2, False)]
    assert all("boarded" not in r for r in records)
    assert decoder.stats.summary()["not_available"] == 3  # DC1 15, DC2 door 1 twice


def test_door_zero_is_closed_when_dc2_takes_over() -> None:
    frames = [at(0.0, encode_td(T0)), at(0.1, encode_dc1(0)), at(0.2, encode_dc2(True, False))]
    records, _ = run(frames)
    assert [(r["door"], r["open"], r["ts"]) for r in records] == [
        (0, True, ms_to_ts(T0 + 100)), (0, False, ms_to_ts(T0 + 200)),
        (1, True, ms_to_ts(T0 + 200)), (2, False, ms_to_ts(T0 + 200))]
