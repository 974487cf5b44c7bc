"""The uplink over TLS (mqtts://) to a real Mosquitto with a TLS listener and a CA made here."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.buffer import Buffer
from agent.config import parse_config
from agent.uplink import Uplink
from tests.agent.helpers import VEHICLE, speed
from tests.agent.responder import Responder
from tests.services import PROJECT, free_port, mosquitto_binary, require, wait_port

pytestmark = pytest.mark.mosquitto


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(folder: Path) -> None:
    """A CA and a server certificate for 127.0.0.1 signed by it."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=frota test CA",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=folder)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=folder)
    (folder / "san.ext").write_text("subjectAltName = IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=folder)


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """A Mosquitto with a plain listener (for the test's responder) and a TLS one: (plain, tls)."""
    binary = mosquitto_binary()
    require(binary is not None, "mosquitto is not installed (apt-get install mosquitto)")
    require(shutil.which("openssl") is not None, "openssl is not installed")
    assert binary is not None
    make_certs(tmp_path)
    plain, tls = free_port(), free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        # As root, mosquitto would switch to its own user, who cannot read the keys in tmp_path.
        f"user root\nper_listener_settings false\nallow_anonymous true\npersistence false\n"
        f"listener {plain} 127.0.0.1\n"
        f"listener {tls} 127.0.0.1\ncafile {tmp_path / 'ca.pem'}\n"
        f"certfile {tmp_path / 'server.pem'}\nkeyfile {tmp_path / 'server.key'}\n"
    )
    with (tmp_path / "mosquitto.log").open("ab") as log:
        proc = subprocess.Popen([binary, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(plain)
        wait_port(tls)
        yield plain, tls
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_records_go_over_tls(tmp_path: Path, tls_broker: tuple[int, int]) -> None:
    plain, tls = tls_broker
    responder = Responder(plain)
    config = parse_config(
        {
            "vehicle": VEHICLE,
            "buffer": {"path": str(tmp_path / "buffer.sqlite")},
            "broker": {"url": f"mqtts://127.0.0.1:{tls}", "tls": {"ca_file": str(tmp_path / "ca.pem")}},
        }
    )
    buf = Buffer(config.buffer.path)
    buf.add([("reg", speed(n, device_seq=n)) for n in range(10)])
    uplink = Uplink(config)
    uplink.start()
    try:
        deadline = time.monotonic() + 30
        while buf.pending_count() > 0:
            assert time.monotonic() < deadline, "records never confirmed over TLS"
            time.sleep(0.05)
    finally:
        uplink.stop()
        responder.close()
        buf.close()
    assert len(responder.records) == 10


def test_a_bad_ca_file_is_refused_at_start(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    conf = tmp_path / "agent.toml"
    conf.write_text(
        f'vehicle = "{VEHICLE}"\n[buffer]\npath = "b.sqlite"\n'
        '[broker]\nurl = "mqtts://127.0.0.1:8883"\n[broker.tls]\nca_file = "ca.pem"\n'
        '[[devices]]\nname = "gps"\nprotocol = "nmea"\nport = "loop://"\n'  # one is required
    )
    proc = subprocess.run(
        [sys.executable, "-m", "frota", "agent", "run", "--config", str(conf)],
        capture_output=True, text=True, timeout=60, cwd=PROJECT,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("frota agent: error: broker.tls: cannot load the TLS files")
