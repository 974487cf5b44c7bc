"""Secret files (the MQTT password, the client key) are checked when the agent starts: no group or
other permission bits; 0600 and systemd's 0400 credentials pass (issue 14 item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import ConfigError, check_secret_modes, load_config
from frota.cli import main


def _config(tmp_path: Path, mode: int, key: str = "password_file") -> Path:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(mode)
    (tmp_path / "ca.pem").write_text("")
    (tmp_path / "c.crt").write_text("")
    tls = '[broker.tls]\nca_file = "ca.pem"\ncert_file = "c.crt"\nkey_file = "secret"\n'
    path = tmp_path / "agent.toml"
    path.write_text(
        'vehicle = "ABC1D23"\n[buffer]\npath = "buffer.sqlite"\n'
        '[broker]\nurl = "mqtts://127.0.0.1:1"\n'
        + ('password_file = "secret"\n' if key == "password_file" else tls)
        + '[[devices]]\nname = "gps"\nprotocol = "nmea"\nport = "loop://"\n'
    )
    return path


@pytest.mark.parametrize("mode", [0o600, 0o400])
@pytest.mark.parametrize("key", ["password_file", "key_file"])
def test_owner_only_secrets_pass(tmp_path: Path, mode: int, key: str) -> None:
    check_secret_modes(load_config(_config(tmp_path, mode, key)))


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o610, 0o601])
@pytest.mark.parametrize("key", ["password_file", "key_file"])
def test_secrets_open_to_group_or_others_are_refused(tmp_path: Path, mode: int, key: str) -> None:
    config = load_config(_config(tmp_path, mode, key))
    with pytest.raises(ConfigError) as err:
        check_secret_modes(config)
    dotted = "broker.password_file" if key == "password_file" else "broker.tls.key_file"
    assert str(err.value).startswith(f"{dotted}: ")
    assert f"(mode {mode:04o})" in str(err.value)


def test_agent_run_refuses_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, 0o644)
    assert main(["agent", "run", "--config", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("frota agent: error: broker.password_file: ")
    assert "0644" in err
    assert "0600 or 0400" in err
    assert not (tmp_path / "buffer.sqlite").exists()  # refused before anything was created
