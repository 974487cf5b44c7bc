"""The registrador simulator: its model on its own, and the real process on a pty read by the decoder."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import serial

from frota.cli import main
from protocols.registrador import RegistradorDecoder, encode_history_request
from protocols.registrador.scanner import check_frame
from simulators.registrador import DefaultDrive, RegistradorModel
from tests.protocols.registrador_vectors import seqs
from tests.services import PROJECT

T0 = 1_772_460_000_000  # 2026-03-02T14:00:00.000Z


def _frames(model: RegistradorModel, now_ms: int) -> list[tuple[int, int, int]]:
    """(type, seq, clock) of what the model transmits by now_ms."""
    out = []
    for emission in model.due(now_ms):
        frame = check_frame(emission.data)
        assert frame is not None
        out.append((frame.type, frame.seq, frame.clock_ms))
    return out


# --- the model, no I/O ----------------------------------------------------------------------------


def test_status_frames_at_the_configured_rate_on_period_boundaries() -> None:
    model = RegistradorModel(T0 + 50, rate_hz=10.0, first_seq=100)
    sent = _frames(model, T0 + 1000)
    assert [clock - T0 for _, _, clock in sent] == list(range(100, 1001, 100))
    assert [seq for _, seq, _ in sent] == list(range(100, 110))
    assert {kind for kind, _, _ in sent} == {0x01}


def test_events_take_the_next_frame_number_in_time_order() -> None:
    model = RegistradorModel(T0, first_seq=1)
    model.insert_card(1, "04512345678", "work", T0 + 2500)
    model.trip("start", "T-0001", "SP-0401", T0 + 2600, scheduled_ms=T0 + 60_000)
    sent = _frames(model, T0 + 3000)
    assert sent == [
        (0x01, 1, T0), (0x01, 2, T0 + 1000), (0x01, 3, T0 + 2000),
        (0x02, 4, T0 + 2500), (0x04, 5, T0 + 2600), (0x01, 6, T0 + 3000),
    ]


def test_odometer_integrates_speed() -> None:
    model = RegistradorModel(T0)
    model.set_speed(72.0, T0)  # 72 km/h = 20 m/s = 0.02 m/ms
    records = RegistradorDecoder("V").feed(b"".join(e.data for e in model.due(T0 + 100_000)))
    odometer = [r["odometer_m"] for r in records if r["kind"] == "speed"]
    assert odometer[0] == 0
    assert odometer[1] == 20
    assert odometer[-1] == 2000  # 100 s at 20 m/s


def test_history_answers_exactly_the_range_from_memory() -> None:
    model = RegistradorModel(T0, first_seq=1, memory=50)
    live = model.due(T0 + 99_000)  # frames 1…100; memory keeps 51…100
    answer = model.history(7, 40, 60, T0 + 100_000)
    assert [e.label for e in answer] == [f"history {n}" for n in range(51, 61)] + ["history end"]
    assert answer[0].data[16:-2] == live[50].data  # the original frame, byte for byte
    decoder = RegistradorDecoder("V")
    records = decoder.feed(b"".join(e.data for e in answer))
    assert sorted({r["device_seq"] for r in records}) == list(range(51, 61))
    (end,) = decoder.history_ends
    assert (end.request_id, end.first, end.last, end.sent, end.oldest) == (7, 40, 60, 10, 51)
    beyond = model.history(8, 500, 600, T0 + 100_000)
    assert [e.label for e in beyond] == ["history end"]


def test_history_request_over_receive_with_garbage_around() -> None:
    model = RegistradorModel(T0, first_seq=1)
    model.due(T0 + 9000)
    request = b"\x00\x55\xaa" + encode_history_request(3, 5, request_id=2) + b"\xaa"
    answer = model.receive(request[:10], T0 + 9000) + model.receive(request[10:], T0 + 9000)
    assert [e.label for e in answer] == ["history 3", "history 4", "history 5", "history end"]


def test_power_cut_silences_then_flags_the_next_status() -> None:
    model = RegistradorModel(T0, first_seq=1)
    model.power_off(T0 + 1500)
    assert model.next_due_ms() == 0  # the power_loss event still goes out
    before = _frames(model, T0 + 10_000)
    assert [kind for kind, _, _ in before] == [0x01, 0x01, 0x03]
    assert model.next_due_ms() is None
    model.power_on(T0 + 10_200)
    after = model.due(T0 + 11_000)
    records = RegistradorDecoder("V").feed(b"".join(e.data for e in after))
    statuses = [(r["status"], r["device_seq"]) for r in records if r["kind"] == "device"]
    assert statuses == [("power_restored", 4), ("power_loss", 5)]


def test_default_drive_moves_and_declares_activities() -> None:
    model = RegistradorModel(T0)
    drive = DefaultDrive(model, T0)
    decoder = RegistradorDecoder("V")
    records = []
    for second in range(0, 1200, 5):
        drive.step(T0 + second * 1000)
        records += decoder.feed(b"".join(e.data for e in model.due(T0 + second * 1000)))
    speeds = [r["kmh"] for r in records if r["kind"] == "speed"]
    assert speeds[0] == 0
    assert max(speeds) > 70
    activities = [(r["slot"], r["activity"]) for r in records if r["kind"] == "driver"]
    assert (1, "work") in activities
    assert (1, "drive") in activities
    assert any(r["kind"] == "trip" for r in records)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--time-scale", "0"], "--time-scale must be > 0, not 0.0"),
        (["--garbage", "1.5"], "garbage must be in [0, 1), not 1.5"),
        (["--start", "yesterday"], "--start: ts: 'yesterday' is not an RFC 3339 timestamp"),
        (["--link", "/nonexistent/dir/tty"], "--link /nonexistent/dir/tty: directory "
         "/nonexistent/dir does not exist"),
    ],
)
def test_cli_user_errors_are_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "registrador", *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"frota sim: error: {message}"]


# --- the real process on a pty --------------------------------------------------------------------


def _read_until(port: serial.Serial, decoder: RegistradorDecoder, done: Any, timeout: float) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done(records):
        records += decoder.feed(port.read(4096))
    return records


def _ask(port: serial.Serial, decoder: RegistradorDecoder, first: int, last: int, rid: int) -> list[dict[str, Any]]:
    """Send a history request and read until its end arrives (or a second passes: noise)."""
    port.write(encode_history_request(first, last, request_id=rid))
    return _read_until(
        port, decoder, lambda _: any(e.request_id == rid for e in decoder.history_ends), 1.0
    )


def _gaps_upto(decoder: RegistradorDecoder, last: int) -> list[tuple[int, int]]:
    return [gap for gap in decoder.gaps() if gap[0] <= last]


@pytest.mark.pty
def test_simulator_to_decoder_over_a_pty_with_garbage_and_history(tmp_path: Path) -> None:
    link = tmp_path / "registrador"
    sent_log = tmp_path / "sent.jsonl"
    errors = tmp_path / "stderr.txt"
    err_stream = errors.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "frota", "--log-level", "WARNING", "sim", "registrador",
         "--link", str(link), "--time-scale", "100", "--garbage", "0.01", "--ber", "0.0002",
         "--seed", "11", "--sent-log", str(sent_log), "--duration", "3600"],
        cwd=PROJECT, stdout=subprocess.PIPE, stderr=err_stream, text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == str(link)
        decoder = RegistradorDecoder("ABC1D23")
        with serial.Serial(str(link), 115200, timeout=0.05) as port:
            live = _read_until(port, decoder, lambda r: len(seqs(r)) >= 150, 20)
            first_live, last_live = seqs(live)[0], seqs(live)[-1]
            missing = decoder.gaps()
            want = missing[0] if missing else (first_live, first_live + 4)
            later = _ask(port, decoder, *want, rid=1)
            # ask for every other gap, and again for what the noise ate (as the agent does)
            for rid in range(2, 60):
                if not _gaps_upto(decoder, last_live):
                    break
                later += _ask(port, decoder, *_gaps_upto(decoder, last_live)[0], rid=rid)
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        err_stream.close()
    assert proc.returncode == 0, errors.read_text()
    log = [json.loads(line) for line in sent_log.read_text().splitlines()]
    intact_live = [e["label"] for e in log if isinstance(e["label"], int) and e["intact"]]
    # every frame sent intact is decoded once, in order
    assert seqs(live) == [seq for seq in intact_live if first_live <= seq <= last_live]
    # the noise did hit: garbage dropped, frames corrupted and so missing
    assert decoder.stats.bytes_dropped > 0
    assert len(intact_live) < len([e for e in log if isinstance(e["label"], int)])
    # the first answer is exactly the range asked, then its end
    answers = [e["label"] for e in log if str(e["label"]).startswith("history")]
    asked = [f"history {n}" for n in range(want[0], want[1] + 1)]
    assert answers[: len(asked) + 1] == [*asked, "history end"]
    # after asking for each gap, every frame from the first to the last is held exactly once
    assert _gaps_upto(decoder, last_live) == []
    groups = seqs(live + later)
    assert set(range(first_live, last_live + 1)) <= set(groups)
    assert len(groups) == len(set(groups))


def test_history_option_starts_with_frames_in_memory(tmp_path: Path) -> None:
    # --history 30 at 1 Hz, a parked bus (status frames only): frames 1-30 (device seconds
    # -30 … -1) are in memory at start and answered by history, never sent live; the first
    # live frame is 31.
    sent = tmp_path / "sent.jsonl"
    with subprocess.Popen(
        [sys.executable, "-m", "frota", "sim", "registrador", "--baud", "0", "--history", "30", "--idle",
         "--start", "2026-03-02T14:00:00Z", "--time-scale", "10", "--sent-log", str(sent)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=PROJECT,
    ) as proc:
        assert proc.stdout is not None
        path = proc.stdout.readline().strip()
        decoder = RegistradorDecoder("SIM")
        records = []
        try:
            with serial.Serial(path, 115200, timeout=0.2) as port:
                port.write(encode_history_request(1, 30, request_id=9))
                deadline = time.monotonic() + 10
                while not decoder.history_ends and time.monotonic() < deadline:
                    records += decoder.feed(port.read(4096))
        finally:
            proc.terminate()
            proc.wait(10)
    (end,) = decoder.history_ends
    assert (end.first, end.last, end.sent, end.oldest) == (1, 30, 30, 1)
    speeds = {r["device_seq"]: r["ts"] for r in records if r["kind"] == "speed"}
    assert set(range(1, 31)) <= set(speeds)
    assert speeds[1] == "2026-03-02T13:59:30.000Z"
    live = [json.loads(line)["label"] for line in sent.read_text().splitlines()]
    assert min(label for label in live if isinstance(label, int)) == 31


def test_history_longer_than_the_memory_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "registrador", "--history", "100001"]) == 1
    assert capsys.readouterr().err.strip() == (
        "frota sim: error: --history must be 0-100000 seconds at --rate 1 (a memory of "
        "100,000 frames), not 100001")
