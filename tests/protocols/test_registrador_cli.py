"""``frota decode --protocol registrador`` on raw captures and hex text, in process and as a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from frota.cli import main
from protocols.records import validate
from tests.protocols.registrador_vectors import NOTE, doc_vectors
from tests.services import PROJECT

V = doc_vectors()
BAD_CRC = V["status"][:-1] + bytes([V["status"][-1] ^ 0xFF])
CAPTURE = b"\x00\x01" + V["status"] + BAD_CRC + V["driver_event"] + V["console_trip"] + V["status"][:10]


def _lines(text: str) -> list[dict[str, Any]]:
    return [validate(json.loads(line)) for line in text.splitlines()]


def _summary(err: str) -> dict[str, Any]:
    (line,) = [ln for ln in err.splitlines() if ln.startswith("decode summary: ")]
    summary: dict[str, Any] = json.loads(line.removeprefix("decode summary: "))
    return summary


def test_raw_capture_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "ABC1D23.bin"
    capture.write_bytes(CAPTURE)
    assert main(["decode", "--protocol", "registrador", str(capture)]) == 0
    out, err = capsys.readouterr()
    records = _lines(out)
    assert [(r["kind"], r["device_seq"]) for r in records] == [
        ("speed", 256), ("driver", 256), ("driver", 256), ("driver", 257), ("trip", 259),
    ]
    assert {r["vehicle"] for r in records} == {"ABC1D23"}
    summary = _summary(err)
    assert summary["protocol"] == "registrador"
    assert summary["vehicle"] == "ABC1D23"
    assert summary["frames"] == 3
    assert summary["crc_failures"] == 1
    assert summary["bytes_dropped"] == 2 + len(BAD_CRC) + 10
    assert summary["bytes_in"] == len(CAPTURE)
    assert "rejected (garbage (2 bytes))" in err
    assert "rejected (truncated or garbage at end of stream (10 bytes))" in err


def test_hex_vectors_straight_from_the_firmware_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the note's blocks are valid --hex input: keep only the lines inside ```hex blocks
    lines, inside = [], False
    for line in NOTE.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = line.startswith("```hex")
            continue
        if inside:
            lines.append(line)
    capture = tmp_path / "vectors.hex"
    capture.write_text("\n".join(lines) + "\n")
    assert main(["decode", "--protocol", "registrador", "--hex", "--vehicle", "XYZ9A87", str(capture)]) == 0
    out, err = capsys.readouterr()
    records = _lines(out)
    assert [r["device_seq"] for r in records] == [256, 256, 256, 257, 258, 259, 260, 256, 256, 256]
    assert {r["vehicle"] for r in records} == {"XYZ9A87"}
    summary = _summary(err)
    assert summary["frames"] == 8
    assert summary["skipped"] == 1  # the history request
    assert summary["bytes_dropped"] == 0


def test_bad_hex_is_a_one_line_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "bad.hex"
    capture.write_text("aa 55 zz\n")
    assert main(["decode", "--protocol", "registrador", "--hex", str(capture)]) == 1
    assert capsys.readouterr().err.strip().startswith("frota decode: error: line 1 is not hex")


def test_stdin_as_a_real_process() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "frota", "decode", "--protocol", "registrador"],
        input=CAPTURE, capture_output=True, cwd=PROJECT, check=False, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    records = _lines(result.stdout.decode())
    assert len(records) == 5
    assert {r["vehicle"] for r in records} == {"stdin"}
    assert _summary(result.stderr.decode())["crc_failures"] == 1
    assert b"Traceback" not in result.stderr
