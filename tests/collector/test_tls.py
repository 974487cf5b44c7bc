"""``mqtts://``: the collector connects to a TLS listener, checking the broker's certificate."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.collector.helpers import CollectorProcess
from tests.services import Mosquitto, mosquitto_binary, require

pytestmark = [pytest.mark.mosquitto, pytest.mark.pty]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[tuple[Mosquitto, Path]]:
    """A private Mosquitto with only a TLS listener, its certificate signed by a throwaway CA."""
    require(mosquitto_binary() is not None, "mosquitto is not installed")
    require(shutil.which("openssl") is not None, "openssl is not installed")
    # Mosquitto started as root drops to the 'mosquitto' user, which cannot read pytest's private
    # tmp_path: the throwaway certificates go to a world-readable folder of their own.
    certs = Path(tempfile.mkdtemp(prefix="frota-tls-"))
    certs.chmod(0o755)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=certs)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=localhost", "-keyout",
             "server.key", "-out", "server.csr", cwd=certs)
    (certs / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt",
             cwd=certs)
    for file in certs.iterdir():
        file.chmod(0o644)
    broker = Mosquitto(tmp_path)
    broker.conf.write_text(
        f"listener {broker.port} 127.0.0.1\n"
        "allow_anonymous true\n"
        f"cafile {certs / 'ca.crt'}\ncertfile {certs / 'server.crt'}\nkeyfile {certs / 'server.key'}\n"
        "persistence false\nlog_dest stderr\nlog_type error\n"
    )
    try:
        broker.start()
        yield broker, certs
    finally:
        broker.stop()
        shutil.rmtree(certs)


def test_the_collector_connects_over_tls(tmp_path: Path, tls_broker: tuple[Mosquitto, Path]) -> None:
    broker, certs = tls_broker
    folder = tmp_path / "collector"
    folder.mkdir()
    proc = CollectorProcess(folder, f"mqtts://127.0.0.1:{broker.port}")
    text = proc.config.read_text().replace(
        "[database]", f'[broker.tls]\nca_file = "{certs / "ca.crt"}"\n[database]'
    )
    proc.config.write_text(text)
    proc.start()  # waits until /health says connected
    try:
        body = proc.wait_health(200)
        assert body["broker"]["connected"] is True
    finally:
        assert proc.stop() == 0
