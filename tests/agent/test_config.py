"""The agent's configuration: the shipped example loads; each bad key is named in the message."""

from __future__ import annotations

import copy
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from agent.config import ConfigError, load_config, parse_config
from tests.services import PROJECT

EXAMPLE = PROJECT / "firmware-notes" / "agent.example.toml"

BASE: dict[str, Any] = {
    "vehicle": "ABC1D23",
    "buffer": {"path": "buffer.sqlite"},
    "broker": {"url": "mqtt://127.0.0.1:1883"},
    "devices": [
        {"name": "reg", "protocol": "registrador", "port": "/dev/ttyUSB0"},
        {
            "name": "doors",
            "protocol": "apc",
            "port": "/dev/ttyUSB1",
            "counters": [{"address": 1, "door": 1}, {"address": 2}],
        },
    ],
}


def test_the_example_file_loads() -> None:
    with EXAMPLE.open("rb") as f:
        config = parse_config(tomllib.load(f))
    assert config.vehicle == "ABC1D23"
    assert [d.protocol for d in config.devices] == ["registrador", "nmea", "apc"]
    assert [d.device for d in config.devices] == ["registrador", "gps", "apc"]
    assert [c.door_number for c in config.devices[2].counters] == [1, 2, 3]
    assert config.broker.tls_enabled
    assert config.broker.port == 8883
    assert config.buffer.retention_days == 90


def test_defaults() -> None:
    config = parse_config(copy.deepcopy(BASE))
    assert config.client_id == "frota-ABC1D23"
    assert config.buffer.retention_days == 90
    assert config.buffer.commit_records == 1000  # agent-config.md
    assert config.uplink.ack_timeout_s == 30.0
    assert config.uplink.resend_max_s == 300.0  # agent-config.md
    assert config.devices[0].baudrate == 115_200
    assert config.broker.port == 1883
    assert not config.broker.tls_enabled


def _set(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    node: Any = data
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("vehicle", _DELETE, "vehicle: missing"),
        ("vehicle", "ABC/1", "vehicle: 'ABC/1' must be"),
        ("vehicle", "", "vehicle:"),
        ("colour", "blue", "colour: unknown key"),
        ("broker.url", "http://x", "broker.url: 'http://x' is not an mqtt:// or mqtts:// URL"),
        ("broker.url", "mqtt://host:99999", "broker.url: 'mqtt://host:99999' has a bad port"),
        ("broker.keepalive_s", 1, "broker.keepalive_s:"),
        (
            "broker",
            {"url": "mqtt://h", "password": "p", "password_file": "f"},
            "broker.password_file: give password or password_file",
        ),
        ("broker.tls.cert_file", "c.pem", "broker.tls.cert_file: cert_file and key_file go together"),
        ("buffer.path", _DELETE, "buffer.path: missing"),
        ("buffer.retention_days", 0, "buffer.retention_days:"),
        ("buffer.commit_records", "many", "buffer.commit_records:"),
        ("uplink.max_in_flight", 0, "uplink.max_in_flight:"),
        ("uplink.resend_max_s", 0, "uplink.resend_max_s:"),
        ("uplink.compress", "maybe", "uplink.compress:"),
        ("devices.0.protocol", "can", "devices[0].protocol:"),
        ("devices.0.parity", "X", "devices[0].parity:"),
        ("devices.0.stopbits", 3, "devices[0].stopbits: 3"),
        ("devices.0.baudrate", -1, "devices[0].baudrate:"),
        ("devices.0.port", _DELETE, "devices[0].port: missing"),
        ("devices.0.counters", [{"address": 1}], "devices[0].counters: only apc"),
        ("devices.1.counters", [], "devices[1].counters: an apc device needs"),
        ("devices.1.counters.0.address", 0, "devices[1].counters[0].address:"),
        ("devices.1.counters.0.door", 2, "devices[1].counters: a door number is used twice"),
        ("devices.1.counters.1.address", 1, "devices[1].counters: two counters share an address"),
        ("devices.1.name", "reg", "devices: two devices are named 'reg'"),
        ("devices.1.reopen_max_s", 0.1, "devices[1].reopen_max_s: must be >= reopen_min_s"),
    ],
)
def test_each_bad_key_is_named(path: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_set(path, value))
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_missing_files_are_named(tmp_path: Path) -> None:
    conf = tmp_path / "agent.toml"
    conf.write_text(
        'vehicle = "X1"\n[buffer]\npath = "b.sqlite"\n'
        '[broker]\nurl = "mqtts://h"\n[broker.tls]\nca_file = "ca.pem"\n'
    )
    with pytest.raises(ConfigError, match=r"^broker\.tls\.ca_file: no such file"):
        load_config(conf)
    (tmp_path / "ca.pem").write_text("x")
    config = load_config(conf)
    assert config.buffer.path == tmp_path / "b.sqlite"
    assert config.broker.tls.ca_file == tmp_path / "ca.pem"


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("vehicle = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_the_command_refuses_a_bad_config_with_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "agent.toml"
    conf.write_text('vehicle = "X1"\n[buffer]\npath = "b.sqlite"\n[broker]\nurl = "ftp://h"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "frota", "agent", "run", "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "frota agent: error: broker.url: 'ftp://h' is not an mqtt:// or mqtts:// URL"
    ]
