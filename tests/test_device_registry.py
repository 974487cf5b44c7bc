"""One device registry (protocols/registry.py): every list of devices derives from it, and a new
device joins through it alone — a toy device run end to end by decode, sim and the agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import ConfigError, parse_config
from agent.sources import Source, source_class
from frota.commands.sim import PLAYER_MODULES, sim_modules
from protocols import registry
from protocols.apc import ApcDecoder
from protocols.base import Decoder
from protocols.fms import FmsDecoder
from protocols.nmea import NmeaDecoder
from protocols.records import DEVICES, ts_to_ms, validate
from protocols.registrador import RegistradorDecoder
from tests.agent.process import AgentProcess
from tests.services import PROJECT, free_port, stop_process

#: Checked by mypy: each built-in decoder is a ``Decoder`` (feed, finish, set_time, stats).
BUILTIN_DECODERS: tuple[Decoder, ...] = (
    RegistradorDecoder("V"),
    NmeaDecoder("V"),
    ApcDecoder("V"),
    FmsDecoder("V"),
)


@pytest.mark.parametrize("name", sorted(registry.BUILTIN))
def test_every_entry_names_code_that_loads(name: str) -> None:
    entry = registry.get(name)
    decoder = entry.make_decoder("V")
    assert type(decoder) in {type(d) for d in BUILTIN_DECODERS}
    assert decoder.finish() == []
    decoder.set_time(0)  # the clock hook is there for every decoder, with or without a clock
    if entry.source is not None:
        assert issubclass(source_class(name), Source)
    if entry.simulator is not None:
        assert callable(registry.load(f"{entry.simulator}:register_sim"))


def test_every_list_of_devices_derives_from_the_registry() -> None:
    entries = registry.BUILTIN.values()
    assert (*dict.fromkeys(e.device for e in entries), "agent") == DEVICES
    assert DEVICES == ("registrador", "gps", "apc", "agent")  # the contract's four (FMS: registrador)
    assert registry.source_protocols() == sorted(e.name for e in entries if e.source)
    assert sim_modules() == [*(e.simulator for e in entries if e.simulator), *PLAYER_MODULES]
    clocks = {e.name: e.clocked for e in entries}
    assert clocks == {"registrador": True, "nmea": True, "apc": False, "fms": True}


def test_the_agent_accepts_exactly_the_protocols_with_a_source() -> None:
    base = {"vehicle": "V", "buffer": {"path": "b.sqlite"}, "broker": {"url": "mqtt://x"}}
    config = parse_config({**base, "devices": [{"name": "g", "protocol": "nmea", "port": "p"}]})
    assert config.devices[0].device == "gps"
    with pytest.raises(ConfigError, match=r"^devices\[0\]\.protocol: 'toy' is not one of 'apc', "):
        parse_config({**base, "devices": [{"name": "t", "protocol": "toy", "port": "p"}]})


# --- a toy device, registered as a separate package would: one module + one entry point ------


@pytest.fixture
def toy_env(tmp_path: Path) -> dict[str, str]:
    """An environment in which the toy device (tests/toy_device.py) is installed as a plugin:
    a ``frota.devices`` entry point in a dist-info folder on PYTHONPATH, nothing else."""
    plugins = tmp_path / "plugins"
    info = plugins / "frota_toy-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: frota-toy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[frota.devices]\ntoy = tests.toy_device:DEVICE\n")
    return {**os.environ, "PYTHONPATH": str(plugins)}


def frota(env: dict[str, str], *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """Run ``frota ARGS`` in the project with ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "frota", *args], input=stdin, capture_output=True, env=env,
        cwd=PROJECT, timeout=60, check=False,
    )


def test_toy_device_decodes_through_the_registry(toy_env: dict[str, str]) -> None:
    capture = b"TOY,1772461385000,87.5\nnot a toy line\nTOY,1772461386000,88.0\nTOY,17"
    done = frota(toy_env, "decode", "--protocol", "toy", "--vehicle", "ABC1D23", stdin=capture)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    for rec in records:
        validate(rec)
    # 1772461385000 ms after the epoch is 2026-03-02 14:23:05 UTC (date -u -d @1772461385).
    assert [(r["kind"], r["ts"], r["kmh"]) for r in records] == [
        ("speed", "2026-03-02T14:23:05.000Z", 87.5),
        ("speed", "2026-03-02T14:23:06.000Z", 88.0),
    ]
    summary = json.loads(done.stderr.decode().splitlines()[0].removeprefix("decode summary: "))
    # "not a toy line\n" is 15 bytes; the unterminated "TOY,17" (6) is dropped by finish().
    assert (summary["frames"], summary["malformed"], summary["bytes_dropped"]) == (2, 1, 21)
    helps = frota(toy_env, "sim", "--help").stdout.decode()
    assert "a toy speedometer" in helps
    assert frota(os.environ | {"PYTHONPATH": ""}, "decode", "--protocol", "toy").returncode == 1


#: The agent's health records about the toy device.
TOY_HEALTH = "source = 'agent' AND kind = 'device' AND json_extract(body, '$.device') = 'toy'"


@pytest.mark.pty
def test_toy_device_from_its_simulator_through_the_agent(
    tmp_path: Path, toy_env: dict[str, str]
) -> None:
    link = tmp_path / "toy.tty"
    folder = tmp_path / "agent"
    folder.mkdir()
    config = folder / "agent.toml"
    config.write_text(
        'vehicle = "ABC1D23"\n[buffer]\npath = "buffer.sqlite"\ncommit_interval_ms = 50\n'
        f'[broker]\nurl = "mqtt://127.0.0.1:{free_port()}"\n'  # nobody there: records stay pending
        f'[[devices]]\nname = "speedo"\nprotocol = "toy"\nport = "{link}"\n'
        "reopen_min_s = 0.1\nreopen_max_s = 0.2\n"
    )
    agent = AgentProcess(config)
    agent.start(env=toy_env)  # before the device is there: reported disconnected, then reopened
    sim: subprocess.Popen[bytes] | None = None
    try:
        agent.wait(TOY_HEALTH, at_least=1)
        sim = subprocess.Popen(
            [sys.executable, "-m", "frota", "sim", "toy", "--link", str(link), "--kmh", "61.5",
             "--time-scale", "10", "--start", "2026-03-02T14:00:00Z"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=toy_env, cwd=PROJECT,
        )
        agent.wait("source = 'speedo' AND kind = 'speed'", at_least=5)
        agent.wait(TOY_HEALTH, at_least=2)  # and ok again
    finally:
        agent.stop()
        if sim is not None:
            stop_process(sim, signal.SIGTERM, 10)
    rows = agent.query("SELECT body FROM records WHERE source = 'speedo' ORDER BY seq")
    speeds = [json.loads(str(body)) for (body,) in rows]
    assert {r["kmh"] for r in speeds} == {61.5}
    # One line per device second, whole seconds from 14:00:01 on, none missing (no noise).
    stamps = [ts_to_ms(r["ts"]) for r in speeds]
    assert stamps[0] >= ts_to_ms("2026-03-02T14:00:01Z")
    assert stamps == list(range(stamps[0], stamps[0] + 1000 * len(stamps), 1000))
    health = [json.loads(str(b)) for (b,) in agent.query(
        f"SELECT body FROM records WHERE {TOY_HEALTH} ORDER BY seq")]
    assert [r["status"] for r in health[:2]] == ["disconnected", "ok"]
