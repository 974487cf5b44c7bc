"""``frota provision`` on the command line: what it prints (never a secret) and its one-line
errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frota.cli import main
from tests.services import free_port


def test_init_vehicle_revoke_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet"
    # The broker's machine is an arm64 one: its plugin's path is given, not looked up here.
    plugin = "/usr/lib/aarch64-linux-gnu/mosquitto_dynamic_security.so"
    assert main(["provision", "init", str(fleet), "--host", "broker.example", "--port", "18883",
                 "--broker-user", "nobody-here", "--dynsec-plugin", plugin]) == 0
    conf = (fleet / "mosquitto" / "mosquitto.conf").read_text()
    assert f"plugin {plugin}\n" in conf
    assert "acl_file" not in conf
    assert "password_file" not in conf
    assert main(["provision", "vehicle", str(fleet), "ABC1D23"]) == 0
    out = capsys.readouterr().out
    for secret in (fleet / "vehicles" / "ABC1D23" / "password",
                   fleet / "collectors" / "main" / "password"):
        assert secret.read_text() not in out
    assert "mqtts://broker.example:18883" in out
    assert "restart the broker" in out
    agent = (fleet / "vehicles" / "ABC1D23" / "agent.toml").read_text()
    assert 'url = "mqtts://broker.example:18883"' in agent
    assert "[identity]" in agent
    keyring = json.loads((fleet / "keyring.json").read_text())["keys"]
    assert sorted((k["role"], k["name"]) for k in keyring) == [
        ("collector", "main"), ("vehicle", "ABC1D23")]
    assert main(["provision", "revoke", str(fleet), "ABC1D23"]) == 0
    keyring = json.loads((fleet / "keyring.json").read_text())["keys"]
    assert [k["revoked"] is not None for k in keyring if k["role"] == "vehicle"] == [True]
    access = json.loads((fleet / "mosquitto" / "dynamic-security.json").read_text())
    # Left: provisioning's own login (frota provision apply) and the collector.
    assert [c["username"] for c in access["clients"]] == ["_frota-provision", "collector-main"]
    assert [r["rolename"] for r in access["roles"]] == ["frota-provision", "frota-collector"]
    capsys.readouterr()
    for argv, message in (
        (["provision", "init", str(fleet)], "already holds a provisioned fleet"),
        (["provision", "vehicle", str(fleet), "ABC1D23"], "already provisioned"),
        (["provision", "vehicle", str(fleet), "bad/id"], "must be 1-64 letters"),
        (["provision", "revoke", str(fleet), "NOPE"], "is not provisioned"),
        (["provision", "vehicle", str(tmp_path / "none"), "X1"], "is not a provisioned fleet"),
        (["provision", "apply", str(fleet), "--broker", f"mqtts://127.0.0.1:{free_port()}"],
         "connection refused"),
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert message in err
        assert err.count("\n") == 1


def test_without_the_plugin_init_warns_and_writes_the_password_and_acl_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from frota.provision import dynsec

    monkeypatch.setattr(dynsec, "find_plugin", lambda: None)
    fleet = tmp_path / "fleet"
    assert main(["provision", "init", str(fleet), "--broker-user", "nobody-here"]) == 0
    assert "dynamic security plugin was not found" in capsys.readouterr().err
    conf = (fleet / "mosquitto" / "mosquitto.conf").read_text()
    assert "acl_file" in conf
    assert "plugin " not in conf
    assert main(["provision", "vehicle", str(fleet), "ABC1D23"]) == 0
    assert "reload the broker (SIGHUP)" in capsys.readouterr().out
    assert "user ABC1D23" in (fleet / "mosquitto" / "acl").read_text()
    assert main(["provision", "apply", str(fleet)]) == 1
    assert "password and ACL files" in capsys.readouterr().err
