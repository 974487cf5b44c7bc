"""The collector's acknowledgements as the agent trusts them (``firmware-notes/mqtt.md``).

An ack is applied only when (1) it decodes within the protocol's bounds, (2) with the fleet CA
configured, it is signed by a collector key that CA certified, and (3) each of its entries is
bound to what the agent sent: the chain hash it names for the last seq of a range (or a conflict's
seq) is the hash of the agent's own record there, and the range is still pending. Anything else
is ignored, counted and logged; nothing in an ack can raise out of here (a bad ack must never
stop the uplink, as ``stored: [[1e999, 1]]`` once stopped paho's thread for good).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from agent.buffer import Buffer
from protocols import identity
from protocols.chain import ack_message, decode_sig
from protocols.records import RecordError, now_ms
from protocols.uplink import Ack, PayloadError, ack_body, decode_ack

log = logging.getLogger(__name__)


@dataclass
class AckCounters:
    """Acks and entries the agent refused (for ``frota agent status`` and the logs)."""

    bad_payloads: int = 0
    bad_signatures: int = 0
    other_agent: int = 0
    unbound_entries: int = 0

    @property
    def ignored(self) -> int:
        """Everything ignored, whatever the reason."""
        return self.bad_payloads + self.bad_signatures + self.other_agent + self.unbound_entries


class AckGate:
    """Decodes, authenticates and binds acknowledgements for one agent."""

    def __init__(self, agent: str, ca_file: Path | None) -> None:
        self.agent = agent
        self.ca: x509.Certificate | None = None
        if ca_file is not None:
            self.ca = identity.load_cert_file(ca_file)
        self.counters = AckCounters()
        self._trusted_keys: dict[str, bytes] = {}  # key id → the certificate that certified it

    def read(self, topic: str, payload: bytes) -> Ack | None:
        """The ack in ``payload`` if it is well formed, for this agent and (with a CA) signed by
        a certified collector; None otherwise (counted and logged). Never raises."""
        try:
            ack = decode_ack(payload)
        except PayloadError as err:
            self.counters.bad_payloads += 1
            log.warning("ignoring a malformed acknowledgement on %s: %s", topic, err)
            return None
        except Exception:  # a decoder bug must not stop paho's thread: say it, drop the ack
            self.counters.bad_payloads += 1
            log.exception("ignoring an unreadable acknowledgement on %s", topic)
            return None
        if ack.agent != self.agent:
            self.counters.other_agent += 1
            log.info("ignoring an acknowledgement for another agent id %s", ack.agent[:64])
            return None
        if self.ca is not None and not self._signed(ack):
            self.counters.bad_signatures += 1
            log.warning("ignoring an acknowledgement on %s not signed by a certified collector", topic)
            return None
        return ack

    def _signed(self, ack: Ack) -> bool:
        if ack.sig is None or ack.cert is None or ack.key is None or self.ca is None:
            return False
        raw = decode_sig(ack.sig)
        if raw is None:
            return False
        try:
            cert = identity.load_cert(ack.cert.encode())
            role, _name = identity.certified(cert, self.ca)
            key = identity.public_key_of(cert)
            message = ack_message(ack_body(ack))
        except (identity.IdentityError, RecordError, ValueError):
            return False
        if role != "collector" or identity.key_id(key) != ack.key:
            return False
        if not identity.valid_at(cert, now_ms()):  # at the host's wall clock
            return False
        return identity.verify(key, raw, message)

    def bind(self, ack: Ack, buffer: Buffer) -> Ack:
        """The part of ``ack`` that names the agent's own pending records by their hashes."""
        wanted = [b for _, b in ack.stored] + [b for _, b, _ in ack.rejected] + ack.conflicts
        own = buffer.hashes(wanted)
        out = Ack(agent=ack.agent, replay=ack.replay)  # replay: no entry to bind
        dropped = 0

        def bound(first: int, last: int, digest: str | None, unsigned_ok: bool) -> bool:
            if digest is None and not unsigned_ok:
                return False
            if digest is not None and own.get(last) != digest:
                return False
            return buffer.pending_in(first, last) > 0

        for first, last in ack.stored:
            if bound(first, last, ack.hashes.get(last), False):
                out.stored.append((first, last))
            else:
                dropped += 1
        for i, (first, last, reason) in enumerate(ack.rejected):
            # A record the collector could not even hash (not JSON it can read) is named by
            # seq only; that is believed only from a certified collector.
            if bound(first, last, ack.hashes.get(last), self.ca is not None):
                out.rejected.append((first, last, reason))
                out.retryable.append(ack.retryable[i] if i < len(ack.retryable) else False)
            else:
                dropped += 1
        for seq in ack.conflicts:
            if bound(seq, seq, ack.hashes.get(seq), False):
                out.conflicts.append(seq)
            else:
                dropped += 1
        if dropped:
            self.counters.unbound_entries += dropped
            log.warning(
                "ignored %d acknowledgement entr%s not matching what this agent sent",
                dropped, "y" if dropped == 1 else "ies",
            )
        return out

