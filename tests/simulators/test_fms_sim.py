"""``frota sim fms``'s models without a pty: the SLCAN adapter's answers, listen-only, and the
bus's frames decoded back by the project's FMS decoder."""

from __future__ import annotations

from protocols.fms import FmsDecoder
from protocols.records import Record, ms_to_ts, ts_to_ms
from simulators.fms import FmsBus, SlcanAdapter, _silence
from simulators.registrador import DefaultDrive

T0 = ts_to_ms("2026-03-02T14:00:00Z")


def test_adapter_answers_commands_and_refuses_to_send_when_listening() -> None:
    adapter = SlcanAdapter(FmsBus(T0))
    # What python-can's slcan sends at open (close, 250 kbit/s, listen-only), then a transmit.
    answers = adapter.receive(b"C\rS5\rL\rT18FEF1EE80000000000000000\r", T0)
    assert [a.data for a in answers] == [b"\r", b"\r", b"\r", b"\x07"]  # CR ok, BEL refused
    assert [a.label for a in answers] == ["answer C", "answer S", "answer L", "answer T"]
    assert adapter.channel == "L"
    assert adapter.transmit_attempts == 1
    assert adapter.receive(b"O\r", T0)[0].data == b"\x07"  # already open


def test_nothing_is_forwarded_before_the_channel_is_opened() -> None:
    adapter = SlcanAdapter(FmsBus(T0))
    assert adapter.due(T0 + 2_000) == []  # those frames are gone, as on a real adapter
    adapter.receive(b"L\r", T0 + 2_000)
    assert adapter.due(T0 + 2_000) == []
    labels = [e.label for e in adapter.due(T0 + 3_000)]
    # TCO1 every 50 ms after the opening, then the second's TD, VDHR and DC2 before its TCO1
    # (DI went out at T0, before the opening, and is repeated only on a change or after 10 s).
    assert labels == [f"TCO1 {T0 + ms}" for ms in range(2_050, 3_000, 50)] + [
        f"{name} {T0 + 3_000}" for name in ("TD", "VDHR", "DC2", "TCO1")]


def _decode(bus: FmsBus, adapter: SlcanAdapter, until_ms: int, drive: DefaultDrive | None,
            step_ms: int = 500) -> list[Record]:
    decoder = FmsDecoder("ABC1D23")
    out: list[Record] = []
    for now in range(T0, until_ms + 1, step_ms):
        if drive is not None:
            drive.step(now)
        out += decoder.feed(b"".join(e.data for e in adapter.due(now)))
    return out + decoder.finish()


def test_the_default_drive_decodes_back() -> None:
    bus = FmsBus(T0, tco1_hz=20)
    adapter = SlcanAdapter(bus)
    adapter.receive(b"L\r", T0)
    drive = DefaultDrive(bus, T0)
    records = _decode(bus, adapter, T0 + 300_000, drive)
    speeds = [r for r in records if r["kind"] == "speed"]
    # One speed record per second (the first TCO1 of each second) plus each start and stop.
    per_second = {r["ts"] for r in speeds}
    assert len(per_second) >= 299
    for r in speeds[::10]:  # the drive's speed at that time, to TCO1's 1/256 km/h
        assert abs(r["kmh"] - drive.speed_at(ts_to_ms(r["ts"]))) <= 0.5, r
    drivers = {(r["slot"], r["driver"], r["activity"]) for r in records if r["kind"] == "driver"}
    assert (1, "04512345678", "work") in drivers  # the card and its DI identification
    assert (1, "04512345678", "drive") in drivers
    assert (2, "04598765432", "available") in drivers
    assert next(r for r in records if r["kind"] == "door")["open"] is False
    assert all(r["ts"] >= ms_to_ts(T0) for r in records)


def test_a_silent_spell_carries_no_frame() -> None:
    bus = FmsBus(T0, tco1_hz=5)
    adapter = SlcanAdapter(bus)
    adapter.receive(b"L\r", T0)
    sent: list[int] = []
    for now in range(T0, T0 + 60_000, 250):
        _silence(bus, now, every_s=20, for_s=10)
        sent += [int(str(e.label).split()[1]) for e in adapter.due(now)]
    quiet = [ms for ms in sent if T0 + 20_250 < ms < T0 + 30_000]
    assert quiet == []
    assert any(ms > T0 + 30_000 for ms in sent)
