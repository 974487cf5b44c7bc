"""One naming scheme for the serial devices: the example configuration names only device paths
the shipped udev rules create, and the Pi guide names the same ones (issue 14 item 1)."""

from __future__ import annotations

import re
import shlex
import tomllib

from tests.services import PROJECT

RULES = PROJECT / "firmware-notes" / "udev" / "99-frota-serial.rules"
EXAMPLE = PROJECT / "firmware-notes" / "agent.example.toml"
GUIDE = PROJECT / "firmware-notes" / "raspberry-pi.md"


def _rules() -> list[dict[str, str]]:
    """Each rule line of the udev file as {key: value}, keys as written (``SYMLINK+``, ``GROUP``)."""
    rules = []
    for line in RULES.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        rule: dict[str, str] = {}
        for item in shlex.split(line.replace(",", " ")):
            match = re.fullmatch(r'([A-Z_]+(?:\{[^}]*\})?[+]?)[=!]=?(.*)', item)
            assert match, f"cannot read {item!r} in {line!r}"
            rule[match.group(1)] = match.group(2)
        rules.append(rule)
    return rules


def created_paths() -> set[str]:
    """The device paths the udev rules create: ``/dev/`` + each SYMLINK+= value."""
    return {"/dev/" + link for rule in _rules() for link in rule.get("SYMLINK+", "").split()}


def test_the_rules_create_one_stable_name_per_device_for_the_dialout_group() -> None:
    rules = _rules()
    assert created_paths() == {"/dev/frota/registrador", "/dev/frota/gps", "/dev/frota/apc"}
    for rule in rules:
        assert rule["SUBSYSTEM"] == "tty"
        # The agent's unit runs as user frota with SupplementaryGroups=dialout: group rw only.
        assert rule["GROUP"] == "dialout"
        assert rule["MODE"] == "0660"


def test_every_device_path_in_the_example_is_one_the_rules_create() -> None:
    devices = tomllib.loads(EXAMPLE.read_text())["devices"]
    paths = [d["port"] for d in devices if d["port"].startswith("/dev/")]
    assert paths, "the example names no device path"
    assert set(paths) <= created_paths(), set(paths) - created_paths()
    # Each protocol's device under the name the rule for that adapter gives it.
    by_protocol = {d["protocol"]: d["port"] for d in devices}
    assert by_protocol["registrador"] == "/dev/frota/registrador"
    assert by_protocol["nmea"] == "/dev/frota/gps"
    assert by_protocol["apc"] == "/dev/frota/apc"


def test_the_pi_guide_names_the_same_devices() -> None:
    named = set(re.findall(r"/dev/frota[/-][a-z0-9]+", GUIDE.read_text()))
    assert named, "the guide names no /dev/frota path"
    assert named <= created_paths(), named - created_paths()
