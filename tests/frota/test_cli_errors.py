"""Exit codes and messages as the README promises (issue 14 item 5): argument errors exit 1 with
one line; `frota decode` says why nothing decoded; missing directories are refused, not made; an
agent without devices is refused; one key name for the MQTT keepalive; the SPDX licence."""

from __future__ import annotations

import functools
import logging
import operator
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from agent.buffer import Buffer, BufferError
from collector.config import ConfigError as CollectorConfigError
from collector.config import parse_config as parse_collector_config
from collector.store import StoreError, open_store
from frota.cli import main
from protocols.registrador.encoder import encode_status
from tests.services import PROJECT

T0_MS = 1_772_460_000_000  # 2026-03-02T14:00:00Z


def _one_line_error(capsys: pytest.CaptureFixture[str], prefix: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(prefix), err
    return err.strip()


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        ([], "frota: error: the following arguments are required: COMMAND"),
        (["nope"], "frota: error: argument COMMAND: invalid choice: 'nope'"),
        (["decode", "--protocol", "nope"], "frota decode: error: argument --protocol: invalid choice"),
        (["agent", "run"], "frota agent run: error: the following arguments are required: --config"),
        (["sim", "gps", "--kmh", "fast"], "frota sim gps: error: argument --kmh: invalid float value"),
        (["collector", "records", "--db", "x"], "frota collector records: error: the following"),
        # An unknown option is reported by the subcommand given it, not by 'frota'.
        (["sim", "gps", "--bogus"], "frota sim gps: error: unrecognized arguments: --bogus"),
        (["agent", "run", "--config", "a.toml", "x"], "frota agent run: error: unrecognized arguments: x"),
        (["--nope", "check", "--registry", "r.json"], "frota: error: unrecognized arguments: --nope"),
    ],
)
def test_argument_errors_exit_1_with_one_line(
    argv: list[str], prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    line = _one_line_error(capsys, prefix)
    assert line.endswith("--help')")


def test_help_and_version_still_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert main(["decode", "--help"]) == 0
    assert "usage: frota decode" in capsys.readouterr().out


def test_the_installed_command_exits_1_on_a_bad_argument() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "frota", "decode", "--protocol", "nope"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


# -- frota decode: nothing decoded ------------------------------------------------------------
def _nmea(body: str) -> bytes:
    """An NMEA sentence with its checksum: XOR of the characters between $ and * (nmea.md)."""
    checksum = functools.reduce(operator.xor, body.encode(), 0)
    return f"${body}*{checksum:02X}\r\n".encode()


def _registrador_capture() -> bytes:
    return b"".join(
        encode_status(seq, T0_MS + seq * 1000, kmh=60.0, odometer_m=seq * 17, ignition=True)
        for seq in range(1, 6)
    )


def _decode(tmp_path: Path, data: bytes, *args: str) -> tuple[int, str]:
    path = tmp_path / "capture.bin"
    path.write_bytes(data)
    return main(["decode", *args, str(path)]), str(path)


def test_the_registrador_capture_decodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The capture the next tests use wrongly is a good one.
    status, _ = _decode(tmp_path, _registrador_capture(), "--protocol", "registrador")
    assert status == 0
    assert capsys.readouterr().out.count('"kind":"speed"') == 5


def test_wrong_protocol_names_the_one_that_decodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, path = _decode(tmp_path, _registrador_capture(), "--protocol", "nmea")
    assert status == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[-1] == (
        f"frota decode: error: no record decoded from {path} ({len(_registrador_capture())} bytes) "
        "as nmea: it holds registrador frames: --protocol registrador?"
    )


def test_nmea_read_as_registrador_names_nmea(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sentences = _nmea("GPRMC,140000.00,A,2332.1234,S,04638.5678,W,45.0,90.0,020326,,,A") * 3
    status, _ = _decode(tmp_path, sentences, "--protocol", "registrador")
    assert status == 1
    assert capsys.readouterr().err.splitlines()[-1].endswith("it holds nmea frames: --protocol nmea?")


def test_hex_text_without_hex_says_add_hex(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "# a capture sent by a field engineer\n" + "\n".join(
        encode_status(seq, T0_MS + seq * 1000, kmh=60.0, odometer_m=17, ignition=True).hex(" ")
        for seq in range(1, 4)
    ) + "\n"
    status, _ = _decode(tmp_path, text.encode(), "--protocol", "registrador")
    assert status == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.endswith("as registrador: the input looks like hex text: add --hex")
    # ...and with --hex it decodes.
    status, _ = _decode(tmp_path, text.encode(), "--protocol", "registrador", "--hex")
    assert status == 0
    assert capsys.readouterr().out.count('"kind":"speed"') == 3


def test_empty_and_unrelated_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, path = _decode(tmp_path, b"", "--protocol", "nmea")
    assert status == 1
    assert capsys.readouterr().err.splitlines()[-1] == f"frota decode: error: nothing to decode: {path} is empty"
    status, _ = _decode(tmp_path, bytes(range(256)) * 4, "--protocol", "nmea")
    assert status == 1
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "as nmea: is it a capture of a nmea device? (see --help and firmware-notes/)"
    )


# -- directories are not made; an agent needs a device -------------------------------------------
def test_a_buffer_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BufferError, match=r"no directory .*missing.* \(create it first\)"):
        Buffer(tmp_path / "missing" / "buffer.sqlite")
    assert not (tmp_path / "missing").exists()


def test_a_database_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"no directory .*missing.* \(create it first\)"):
        open_store(str(tmp_path / "missing" / "collector.db"))
    assert not (tmp_path / "missing").exists()


def _agent_toml(tmp_path: Path, buffer: str, devices: bool) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(
        f'vehicle = "ABC1D23"\n[buffer]\npath = "{buffer}"\n[broker]\nurl = "mqtt://127.0.0.1:1"\n'
        + ('[[devices]]\nname = "gps"\nprotocol = "nmea"\nport = "loop://"\n' if devices else "")
    )
    return path


def test_agent_run_refuses_a_missing_buffer_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["agent", "run", "--config", str(_agent_toml(tmp_path, "var/buffer.sqlite", True))]) == 1
    line = _one_line_error(capsys, "frota agent: error: cannot open the buffer ")
    assert f"no directory '{tmp_path / 'var'}'" in line
    assert not (tmp_path / "var").exists()


def test_agent_run_refuses_no_devices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "run", "--config", str(_agent_toml(tmp_path, "buffer.sqlite", False))]) == 1
    _one_line_error(capsys, "frota agent: error: devices: none configured; the agent would record nothing")
    assert not (tmp_path / "buffer.sqlite").exists()


# -- one key name for the MQTT keepalive ---------------------------------------------------------
def test_the_collector_reads_keepalive_s_like_the_agent(tmp_path: Path) -> None:
    config = parse_collector_config('registry = "f.json"\n[broker]\nkeepalive_s = 45\n', tmp_path)
    assert config.broker.keepalive_s == 45
    agent_example = tomllib.loads((PROJECT / "firmware-notes" / "agent.example.toml").read_text())
    collector_example = tomllib.loads((PROJECT / "collector" / "collector.example.toml").read_text())
    assert "keepalive_s" in agent_example["broker"]
    assert "keepalive_s" in collector_example["broker"]


def test_the_old_collector_key_is_read_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        config = parse_collector_config('registry = "f.json"\n[broker]\nkeepalive = 45\n', tmp_path)
    assert config.broker.keepalive_s == 45
    assert "collector.toml: broker.keepalive is deprecated, call it broker.keepalive_s" in caplog.text
    with pytest.raises(CollectorConfigError, match=r"broker\.keepalive: give broker\.keepalive_s only"):
        parse_collector_config(
            'registry = "f.json"\n[broker]\nkeepalive = 45\nkeepalive_s = 45\n', tmp_path
        )


def test_the_licence_is_an_spdx_string() -> None:
    # A TOML table is deprecated by setuptools (PEP 639); the SPDX string needs setuptools >= 77.
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert "setuptools>=77" in project["build-system"]["requires"]
