"""An ack is applied only while the collector's certificate is valid at the agent's clock: one
signed under a certificate that expired, or is not valid yet, is counted as badly signed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from agent.acks import AckGate
from collector.signer import AckSigner
from protocols import identity
from protocols.uplink import Ack, ack_topic, encode_ack

AGENT = "agent-1"
VEHICLE = "ABC1D23"


def _signer(folder: Path, not_before: dt.datetime, days: float) -> tuple[AckSigner, Path]:
    ca_key, ca_cert = identity.make_ca("fleet", not_before=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
                                       days=365 * 30)
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(ca_key, ca_cert, "main", "collector", key.public_key(),
                                        days=days, not_before=not_before)
    (folder / "c.key").write_bytes(identity.private_pem(key))
    (folder / "c.crt").write_bytes(identity.cert_pem(cert))
    (folder / "ca.crt").write_bytes(identity.cert_pem(ca_cert))
    return AckSigner(folder / "c.key", folder / "c.crt", folder / "ca.crt"), folder / "ca.crt"


@pytest.mark.parametrize(("start_days", "days", "applied"), [
    (-1, 2, True),      # valid now
    (-3, 2, False),     # expired yesterday
    (1, 2, False),      # valid only from tomorrow
])
def test_an_ack_counts_only_under_a_certificate_valid_now(
        tmp_path: Path, start_days: int, days: float, applied: bool) -> None:
    now = dt.datetime.now(dt.UTC)
    signer, ca = _signer(tmp_path, now + dt.timedelta(days=start_days), days)
    gate = AckGate(AGENT, ca)
    ack = Ack(agent=AGENT, stored=[(1, 1)], vehicle=VEHICLE)
    ack.hashes = {1: "0" * 64}
    got = gate.read(ack_topic(VEHICLE), encode_ack(signer.sign(ack)))
    assert (got is not None) is applied
    assert gate.counters.bad_signatures == (0 if applied else 1)
