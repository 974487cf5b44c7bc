"""The collector's signature on its acknowledgements (``firmware-notes/mqtt.md``, ``docs/trust.md``).

The collector's Ed25519 key is certified by the fleet CA (``frota provision``); each ack carries
the collector's name, key id and certificate, and the signature over the ack's RFC 8785 bytes, so
an agent holding only the CA certificate can check it.
"""

from __future__ import annotations

import base64
from pathlib import Path

from protocols import identity
from protocols.chain import ack_message
from protocols.uplink import Ack, ack_body


class AckSigner:
    """Signs acknowledgements with the collector's certified key."""

    def __init__(self, key_file: Path, cert_file: Path, ca_file: Path) -> None:
        self.key = identity.load_signing_key(key_file)
        cert = identity.load_cert_file(cert_file)
        role, self.name = identity.certified(cert, identity.load_cert_file(ca_file))
        if role != "collector":
            raise identity.IdentityError(f"{cert_file}: not a collector's certificate ({role})")
        if identity.key_id(identity.public_key_of(cert)) != identity.key_id(self.key.public_key()):
            raise identity.IdentityError(f"{cert_file} does not certify the key in {key_file}")
        self.key_id = identity.key_id(self.key.public_key())
        self.cert_pem = identity.cert_pem(cert).decode()

    def sign(self, ack: Ack) -> Ack:
        """``ack`` with the collector's name, key, certificate and signature set."""
        ack.collector, ack.key, ack.cert = self.name, self.key_id, self.cert_pem
        ack.sig = base64.b64encode(self.key.sign(ack_message(ack_body(ack)))).decode()
        return ack
