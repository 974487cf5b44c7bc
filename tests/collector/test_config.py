"""collector.toml: the example loads; every bad file is one line naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collector.config import ConfigError, load_config, parse_config
from tests.collector.helpers import write_fleet
from tests.services import PROJECT

EXAMPLE = PROJECT / "collector" / "collector.example.toml"


def test_the_example_file_loads_with_paths_next_to_it(tmp_path: Path) -> None:
    write_fleet(tmp_path)
    config_path = tmp_path / "collector.toml"
    config_path.write_text(EXAMPLE.read_text())
    config = load_config(config_path)
    assert config.registry == tmp_path / "fleet.json"
    assert config.database.url == str(tmp_path / "collector.db")
    assert (config.broker.host, config.broker.port, config.broker.uses_tls) == (
        "127.0.0.1",
        1883,
        False,
    )
    assert config.broker.client_id == "frota-collector"
    assert (config.http.host, config.http.port) == ("127.0.0.1", 8080)
    assert config.database.rejects_max_bytes == 1024 * 1024 * 1024   # 1024 MiB


def test_rejects_max_mb_in_bytes() -> None:
    config = parse_config('registry = "f.json"\n[database]\nrejects_max_mb = 0.5\n', Path("/x"))
    assert config.database.rejects_max_bytes == 524_288               # 0.5 × 1,048,576


def test_defaults_and_tls() -> None:
    config = parse_config(
        'registry = "/srv/fleet.json"\n[broker]\nurl = "mqtts://broker.example"\n'
        '[broker.tls]\nca_file = "ca.crt"\n[database]\ndsn = "postgresql://frota@db/frota"\n',
        Path("/etc/frota"),
    )
    assert (config.broker.port, config.broker.uses_tls) == (8883, True)
    assert config.broker.tls.ca_file == Path("/etc/frota/ca.crt")
    assert config.database.url == "postgresql://frota@db/frota"
    # the live evaluation at most half a second after a record (docs/collector.md); the readers
    # left to the machine (ingest.reader_processes)
    assert config.findings.max_delay_s == 0.5
    assert config.ingest.readers is None
    assert config.ingest.read_limit_s == 30.0  # a batch read in under a second (readers.py)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[broker]\n", "collector.toml: registry: missing (required)"),
        ('registry = "f.json"\ncolour = 1\n', "collector.toml: colour: unknown key"),
        ('registry = "f.json"\n[broker]\nurl = "http://x"\n',
         "collector.toml: broker.url: 'http://x' is not an mqtt:// or mqtts:// URL"),
        ('registry = "f.json"\n[broker]\nurl = "mqtt://"\n',
         "collector.toml: broker.url: 'mqtt://' has no host"),
        ('registry = "f.json"\n[broker]\nurl = "mqtt://h:99999"\n',
         "collector.toml: broker.url: 'mqtt://h:99999' has a bad port"),
        ('registry = "f.json"\n[broker]\nclient_id = ""\n',
         "collector.toml: broker.client_id: String should have at least 1 character"),
        ('registry = "f.json"\n[broker]\nkeepalive_s = 1\n',
         "collector.toml: broker.keepalive_s: Input should be greater than or equal to 5"),
        ('registry = "f.json"\n[broker]\npassword = "x"\n',
         "collector.toml: broker.password: given without broker.username"),
        ('registry = "f.json"\n[broker.tls]\ncert_file = "c.crt"\n',
         "collector.toml: broker.tls: cert_file and key_file go together"),
        ('registry = "f.json"\n[database]\npath = "a.db"\ndsn = "postgresql://x/y"\n',
         "collector.toml: database: give path or dsn, not both"),
        ('registry = "f.json"\n[database]\ndsn = "mysql://x/y"\n',
         "collector.toml: database.dsn: 'mysql://x/y' must start with postgresql://"),
        ('registry = "f.json"\n[database]\nsynchronous = "off"\n',
         "collector.toml: database.synchronous: Input should be 'full' or 'normal'"),
        ('registry = "f.json"\n[database]\nrejects_max_mb = 0\n',
         "collector.toml: database.rejects_max_mb: Input should be greater than 0"),
        ('registry = "f.json"\n[http]\nport = "eighty"\n',
         "collector.toml: http.port: Input should be a valid integer"),
        ('registry = "f.json"\n[http]\nport = 70000\n',
         "collector.toml: http.port: Input should be less than or equal to 65535"),
        ('registry = "f.json"\n[ingest]\nmax_payload_bytes = 99999999\n',
         "collector.toml: ingest.max_payload_bytes: Input should be less than or equal to 1048576"),
        ('registry = "f.json"\n[ingest]\nreaders = -1\n',
         "collector.toml: ingest.readers: Input should be greater than or equal to 0"),
        ('registry = "f.json"\n[ingest]\nreaders = 17\n',
         "collector.toml: ingest.readers: Input should be less than or equal to 16"),
        ('registry = "f.json"\n[ingest]\nread_limit_s = 0\n',
         "collector.toml: ingest.read_limit_s: Input should be greater than 0"),
        ('registry = "f.json"\n[ingest]\nread_limit_s = 3601\n',
         "collector.toml: ingest.read_limit_s: Input should be less than or equal to 3600"),
        ('registry = "f.json"\n[findings]\nmax_delay_s = 0.05\n',
         "collector.toml: findings.max_delay_s: Input should be greater than or equal to 0.1"),
        ('registry = "f.json"\n[findings]\nmax_delay_s = 61\n',
         "collector.toml: findings.max_delay_s: Input should be less than or equal to 60"),
        ("registry = \n", "collector.toml: not valid TOML: "),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, Path("/etc/frota"))
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_files_are_named(tmp_path: Path) -> None:
    path = tmp_path / "collector.toml"
    path.write_text('registry = "fleet.json"\n')
    with pytest.raises(ConfigError, match=r"^collector.toml: registry: no such file .*fleet.json$"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"^cannot read .*nope.toml: No such file or directory$"):
        load_config(tmp_path / "nope.toml")


def test_frota_collector_run_refuses_a_bad_config_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "collector.toml"
    path.write_text('registry = "fleet.json"\n[http]\nport = -1\n')
    result = subprocess.run(
        [sys.executable, "-m", "frota", "collector", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == (
        "frota collector: error: collector.toml: http.port: "
        "Input should be greater than or equal to 0\n"
    )
