"""frota agent export (issue 17 item 4): the bus's own bundle from its buffer, signed by its
provisioned key, read-only while the agent's buffer is open and being written; frota verify
accepts it against the fleet CA and rejects it tampered with (a record removed, changed, added)
or presented as another bus's; every export logged; bad input is a one-line error."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from agent.buffer import Buffer
from agent.config import load_config
from agent.export import signer_of
from frota.cli import main
from frota.provision import fleet as provisioning
from protocols import identity
from protocols.bundle import chains, pack
from protocols.bundle_check import check_bundle
from tests.roadside.bundles import tamper
from tests.services import free_port
from tests.trust.broker import broker_user
from tests.trust.fleet import speed

BUS = "ABC1D23"
#: records are tests/trust/fleet.py's speed frames: frame n at 2026-03-02T14:00:00Z + n s


@pytest.fixture
def bus(tmp_path: Path) -> tuple[Path, Path]:
    """A provisioned bus (agent.toml, key, certificate) and its fleet CA's file."""
    made = provisioning.init(tmp_path / "fleet", hosts=["127.0.0.1"], port=free_port(),
                             bind="127.0.0.1", broker_user=broker_user(), persistence=False)
    config = provisioning.add_vehicle(made, BUS, str(tmp_path / "buffer.sqlite"))
    return config, made.ca_cert_path


def _fill(config: Path, frames: list[int]) -> Buffer:
    buf = Buffer(load_config(config).buffer.path)
    buf.add([("registrador", speed(BUS, n)) for n in frames])
    return buf


def test_an_export_of_the_last_day_verifies(bus: tuple[Path, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    config, ca = bus
    # three days of a frame an hour (seq 1..72), then the buffer stays open, as the agent's
    buf = _fill(config, [h * 3600 for h in range(72)])
    try:
        stick = tmp_path / "usb"
        stick.mkdir()
        assert main(["agent", "export", "--config", str(config), "--days", "1",
                     "--out", str(stick)]) == 0
        out = capsys.readouterr().out
        (path,) = stick.iterdir()
        assert path.name == f"frota-{BUS}-2026-03-05.zip"   # newest record: T0 + 71 h
        # the last day back from the newest record (T0 + 71 h): T0 + 47 h + 1 ms on, seq 49..72
        assert "24 record(s) (seq 49 to 72)" in out
        assert buf.counts().pending == 72                      # the agent's buffer untouched
        buf.add([("registrador", speed(BUS, 72 * 3600))])       # and it can still write
    finally:
        buf.close()
    assert main(["verify", str(path), "--ca", str(ca)]) == 0
    out = capsys.readouterr().out
    assert f"signed by vehicle {BUS}" in out
    assert "24 record(s), 24 chained" in out
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        assert set(zf.namelist()) == {"records.jsonl", "manifest.json", "manifest.sig",
                                      "certs/vehicle.pem", "certs/ca.pem"}
        lines = zf.read("records.jsonl").splitlines()
    assert (manifest["vehicle"], manifest["made_by"], manifest["records"]) == (BUS, "agent", 24)
    # written as the buffer is read (never whole in memory): the records are frames 48..71 h in
    # seq order (49..72), and the manifest's chains are those the whole lines give
    assert [json.loads(line)["seq"] for line in lines] == list(range(49, 73))
    assert manifest["chains"] == chains(lines)
    assert manifest["chains"][0]["first_prev"] == json.loads(lines[0])["prev"]
    assert manifest["to"] == "2026-03-05T13:00:00.001Z"
    # every export logged beside the buffer
    (entry,) = [json.loads(line) for line in
                (tmp_path / "exports.log").read_text().splitlines()]
    assert (entry["records"], entry["first_seq"], entry["last_seq"]) == (24, 49, 72)
    assert entry["to"] == str(path)


def test_a_tampered_agent_bundle_is_rejected_where(bus: tuple[Path, Path], tmp_path: Path) -> None:
    config, ca = bus
    _fill(config, list(range(0, 600, 10))).close()                 # seq 1..60
    path = tmp_path / "bundle.zip"
    assert main(["agent", "export", "--config", str(config), "--days", "2",
                 "--out", str(path)]) == 0
    data = path.read_bytes()
    fleet_ca = identity.load_cert_file(ca)
    assert check_bundle(data, fleet_ca).intact
    removed = check_bundle(tamper(data, lambda ls: ls[:9] + ls[10:]), fleet_ca)
    assert ("gap", 10, 11) in [(p.code, p.line, p.seq) for p in removed.problems]
    changed = check_bundle(tamper(data, lambda ls: [*ls[:9], ls[9].replace(b'"kmh":77',
                                                                             b'"kmh":57'),
                                                    *ls[10:]]), fleet_ca)
    assert ("broken_link", 11, 11) in [(p.code, p.line, p.seq) for p in changed.problems]
    added = check_bundle(tamper(data, lambda ls: [*ls, ls[0]]), fleet_ca)
    assert ("duplicate", 61, 1) in [(p.code, p.line, p.seq) for p in added.problems]


def test_another_bus_cannot_pass_its_bundle_for_this_one(
        bus: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, ca = bus
    made = provisioning.load(ca.parent)
    other = provisioning.add_vehicle(made, "XYZ9K88", str(tmp_path / "other.sqlite"))
    # the other bus's agent made to claim ABC1D23's vehicle id: refused at export (its
    # certificate names XYZ9K88), and a bundle claiming it anyway fails verification
    text = other.read_text().replace('vehicle = "XYZ9K88"', f'vehicle = "{BUS}"')
    forged_config = other.parent / "forged.toml"  # its paths are relative to its folder
    forged_config.write_text(text)
    _fill(forged_config, [1, 2, 3]).close()
    assert main(["agent", "export", "--config", str(forged_config), "--days", "1",
                 "--out", str(tmp_path / "x.zip")]) == 1
    assert "the certificate is for vehicle XYZ9K88, not vehicle ABC1D23" in capsys.readouterr().err
    # a bundle signed by XYZ9K88's certified key but naming ABC1D23: refused by frota verify
    signer = signer_of(load_config(other))
    assert signer is not None
    forged = pack({"records.jsonl": b""}, {"vehicle": BUS, "records": 0, "chains": []}, signer)
    problems = check_bundle(forged, identity.load_cert_file(ca)).problems
    assert [(p.code, p.detail) for p in problems] == [
        ("wrong_signer", {"role": "vehicle", "name": "XYZ9K88"})]


def test_bad_input_is_one_line(bus: tuple[Path, Path], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = bus
    assert main(["agent", "export", "--config", str(config), "--days", "0",
                 "--out", str(tmp_path / "x.zip")]) == 1
    assert "--days must be 1 to 31" in capsys.readouterr().err
    assert main(["agent", "export", "--config", str(config), "--days", "1",
                 "--out", str(tmp_path / "x.zip")]) == 1
    assert "no buffer at" in capsys.readouterr().err
    _fill(config, [1]).close()
    assert main(["agent", "export", "--config", str(config), "--days", "1",
                 "--out", str(tmp_path / "no" / "such" / "x.zip")]) == 1
    assert "cannot write" in capsys.readouterr().err
    # a folder named with a trailing / that is not there (a stick not mounted): no file
    # written under its name
    assert main(["agent", "export", "--config", str(config), "--days", "1",
                 "--out", str(tmp_path / "usb0") + "/"]) == 1
    assert "no folder" in capsys.readouterr().err
    assert not (tmp_path / "usb0").exists()
    # a second export of the same day into a folder keeps the first: -2 before .zip
    stick = tmp_path / "stick"
    stick.mkdir()
    for _ in range(2):
        assert main(["agent", "export", "--config", str(config), "--days", "1",
                     "--out", str(stick) + "/"]) == 0
    # the one record: frame 1, 2026-03-02T14:00:01Z
    assert sorted(p.name for p in stick.iterdir()) == [f"frota-{BUS}-2026-03-02-2.zip",
                                                       f"frota-{BUS}-2026-03-02.zip"]
