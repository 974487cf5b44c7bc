"""The systemd unit is hardened (``systemd-analyze security`` <= 3.0, it was 8.4 EXPOSED) and still
lets the agent do its job: read the serial devices the udev rules make, open CAN and broker
sockets, write its state directory and nothing in /etc (issue 14 item 2)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from tests.agent.test_device_names import RULES, created_paths
from tests.services import PROJECT, require

UNIT = PROJECT / "firmware-notes" / "systemd" / "frota-agent.service"
EXAMPLE = PROJECT / "firmware-notes" / "agent.example.toml"
#: The issue's target for the unit's overall exposure (systemd-analyze's 0-10 scale).
TARGET = 3.0


def _settings() -> dict[str, list[str]]:
    """The [Service] section: key → every value given, in order."""
    values: dict[str, list[str]] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def exposure(unit: Path) -> tuple[float, str]:
    """The unit's overall exposure level and systemd-analyze's last line."""
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(unit)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", line)
    assert match, result.stdout[-500:]
    return float(match.group(1)), line


def test_the_unit_scores_at_most_3_0_exposure(tmp_path: Path) -> None:
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed")
    unit = tmp_path / UNIT.name
    shutil.copy(UNIT, unit)
    score, line = exposure(unit)
    print(f"\nsystemd-analyze security: {score:.1f} (target <= {TARGET:.1f}): {line}")
    assert score <= TARGET, line


def test_the_score_is_worth_something(tmp_path: Path) -> None:
    # The same unit without its hardening scores as exposed as before (8.4): the number moves.
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed")
    kept = ("Type", "ExecStart", "User", "Group", "SupplementaryGroups", "NotifyAccess")
    lines = [
        line for line in UNIT.read_text().splitlines()
        if "=" not in line or line.startswith(("#", "Description", "After", "WantedBy")) or line.split("=", 1)[0] in kept
    ]
    unit = tmp_path / UNIT.name
    unit.write_text("\n".join(lines) + "\n")
    score, line = exposure(unit)
    assert score > 8.0, line


def test_the_unit_leaves_the_agent_what_it_needs() -> None:
    s = _settings()
    # Serial devices: the group the udev rules give them, and their device classes.
    groups = {g for value in s["SupplementaryGroups"] for g in value.split()}
    assert "dialout" in groups
    assert 'GROUP="dialout"' in RULES.read_text()
    assert s["DevicePolicy"] == ["closed"]
    allowed = {v.split()[0] for v in s["DeviceAllow"] if v.split()[1] == "rw"}
    # Each USB adapter the rules name (FTDI/CH340 → ttyUSB, u-blox CDC-ACM → ttyACM), the UARTs.
    assert {"char-ttyUSB", "char-ttyACM", "char-ttyAMA"} <= allowed
    assert created_paths()  # the names the agent opens are links to those devices
    assert "PrivateDevices" not in s  # it would hide the serial devices
    # Sockets: sd_notify/journal, the broker over IPv4/IPv6, FMS on SocketCAN.
    families = set(" ".join(s["RestrictAddressFamilies"]).split())
    assert {"AF_UNIX", "AF_INET", "AF_INET6", "AF_CAN"} <= families
    assert "PrivateNetwork" not in s
    assert "IPAddressDeny" not in s
    # The buffer is written where the example puts it; /etc (its configuration) is read-only.
    buffer = Path(tomllib.loads(EXAMPLE.read_text())["buffer"]["path"])
    assert s["ProtectSystem"] == ["strict"]
    assert str(buffer.parent) in " ".join(s["ReadWritePaths"])
    assert s["StateDirectory"] == ["frota"]
    assert buffer.parent == Path("/var/lib/frota")
    assert not any("/etc" in v for v in s["ReadWritePaths"])
    assert s["User"] == ["frota"]
    assert s["SystemCallFilter"][0] == "@system-service"
