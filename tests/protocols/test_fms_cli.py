"""``frota decode --protocol fms`` on candump logs, SLCAN text and hex of SLCAN bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from frota.cli import main
from protocols import registry
from protocols.fms import CanFrame, slcan
from protocols.records import validate
from tests.protocols.fms_vectors import DRIVE_AND_STOP, doc_blocks, doc_frames
from tests.services import PROJECT

CANDUMP = doc_blocks()["drive_and_stop"]


def _slcan_text() -> bytes:
    return b"".join(
        slcan.encode_frame(CanFrame(None, can_id, True, data),
                           timestamp_ms=round((rx - 1_699_999_990) * 1000))
        for rx, can_id, data in doc_frames("drive_and_stop")
    )


def _records(text: str) -> list[dict[str, Any]]:
    return [validate(json.loads(line)) for line in text.splitlines()]


def _summary(err: str) -> dict[str, Any]:
    (line,) = [ln for ln in err.splitlines() if ln.startswith("decode summary: ")]
    summary: dict[str, Any] = json.loads(line.removeprefix("decode summary: "))
    return summary


def _expected() -> list[tuple[str, str]]:
    return [(e["kind"], e["ts"]) for e in DRIVE_AND_STOP]


def test_fms_is_registered_with_its_note() -> None:
    info = registry.get("fms")
    assert info.firmware_note == "fms.md"
    assert info.make_decoder("ABC1D23").stats.frames == 0


def test_candump_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "ABC1D23.log"
    capture.write_text(CANDUMP + "garbage line\n")
    assert main(["decode", "--protocol", "fms", str(capture)]) == 0
    out, err = capsys.readouterr()
    records = _records(out)
    assert [(r["kind"], r["ts"]) for r in records] == _expected()
    assert {r["vehicle"] for r in records} == {"ABC1D23"}
    summary = _summary(err)
    assert (summary["protocol"], summary["frames"], summary["malformed"]) == ("fms", 15, 1)
    assert summary["sampled_out"] == 1
    assert "rejected (SLCAN line starts with 'g'" in err


def test_slcan_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "slcan.txt"
    capture.write_bytes(b"V1013\rz\r" + _slcan_text())
    assert main(["decode", "--protocol", "fms", "--vehicle", "XYZ9A87", str(capture)]) == 0
    out, err = capsys.readouterr()
    records = _records(out)
    assert [(r["kind"], r["ts"]) for r in records] == _expected()
    assert _summary(err)["skipped"] == 2 + 2  # two adapter answers; DC1 after DC2, CCVS1


def test_hex_of_slcan_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _slcan_text()
    capture = tmp_path / "capture.hex"
    capture.write_text("\n".join(data[i : i + 16].hex(" ") for i in range(0, len(data), 16)))
    assert main(["decode", "--protocol", "fms", "--hex", str(capture)]) == 0
    out, _ = capsys.readouterr()
    assert [(r["kind"], r["ts"]) for r in _records(out)] == _expected()


def test_stdin_as_a_real_process() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "frota", "decode", "--protocol", "fms"],
        input=CANDUMP.encode() + b"\xff\xfe\n", capture_output=True, cwd=PROJECT, check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    records = _records(result.stdout.decode())
    assert len(records) == len(DRIVE_AND_STOP)
    assert {r["vehicle"] for r in records} == {"stdin"}
    assert _summary(result.stderr.decode())["malformed"] == 1
    assert b"Traceback" not in result.stderr


def test_hex_line_stamps_date_a_capture_without_td(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """No TD: the records take the --hex lines' time stamps, each frame its own line's."""
    (_, moving_id, moving), = doc_frames("tco1_drive")
    stopped = bytes.fromhex("0A10D00000000000")  # the note's 10.7 step 6
    lines = [
        "2026-03-02T14:00:00.000Z " + slcan.encode_frame(CanFrame(None, moving_id, True, moving)).hex(),
        "2026-03-02T14:00:07.500Z " + slcan.encode_frame(CanFrame(None, moving_id, True, stopped)).hex(),
    ]
    capture = tmp_path / "capture.hex"
    capture.write_text("\n".join(lines) + "\n")
    assert main(["decode", "--protocol", "fms", "--hex", str(capture)]) == 0
    out, err = capsys.readouterr()
    records = _records(out)
    assert [(r["kind"], r["ts"]) for r in records] == [
        ("speed", "2026-03-02T14:00:00.000Z"), ("driver", "2026-03-02T14:00:00.000Z"),
        ("driver", "2026-03-02T14:00:00.000Z"), ("speed", "2026-03-02T14:00:07.500Z"),
        ("driver", "2026-03-02T14:00:07.500Z")]
    assert _summary(err)["estimated"] == 5
