"""``frota provision`` end to end: a real Mosquitto started on the provisioned configuration.

Negative checks never wait for "nothing happened": after a forbidden publish the same client
publishes an allowed sentinel, and MQTT delivers one client's messages in order, so the sentinel
arriving first proves the forbidden message was dropped.
"""

from __future__ import annotations

import queue
import stat

import pytest

from frota.provision import broker as broker_files
from frota.provision import fleet as provisioning
from tests.trust.broker import Client, connected, provisioned_broker

pytestmark = pytest.mark.mosquitto

A, B = "ABC1D23", "XYZ9K88"
COLLECTOR = "collector-main"


def _next(client: Client) -> tuple[str, bytes]:
    return client.messages.get(timeout=10)


def test_anonymous_and_wrong_passwords_are_refused() -> None:
    with provisioned_broker() as running:
        ca = running.fleet.ca_cert_path
        anonymous = Client(running.port, ca, None, None)
        assert anonymous.connect().is_failure
        anonymous.close()
        wrong = Client(running.port, ca, A, "not-the-password")
        assert wrong.connect().is_failure
        wrong.close()
        with connected(running, A):
            pass  # the provisioned password works


def test_plain_tcp_is_refused() -> None:
    with provisioned_broker() as running:
        plain = Client(running.port, None, A, running.password(A), tls=False)
        try:  # the TLS listener never answers a plain CONNECT with a CONNACK
            reason = plain.connect(timeout=3)
        except (OSError, queue.Empty):
            reason = None
        plain.close()
        assert reason is None or reason.is_failure


def test_a_bus_writes_only_its_own_topics() -> None:
    with provisioned_broker() as running, connected(running, COLLECTOR) as collector:
        collector.subscribe("frota/v1/+/up")
        collector.subscribe("frota/v1/+/status")
        with connected(running, B) as bus_b:
            bus_b.publish(f"frota/v1/{A}/up", b"forged")
            bus_b.publish(f"frota/v1/{A}/status", b"forged status")
            bus_b.publish(f"frota/v1/{B}/up", b"sentinel")
            assert _next(collector) == (f"frota/v1/{B}/up", b"sentinel")


def test_a_bus_reads_only_its_own_acks_and_only_collectors_write_acks() -> None:
    with (
        provisioned_broker() as running,
        connected(running, COLLECTOR) as collector,
        connected(running, A) as bus_a,
        connected(running, B) as bus_b,
    ):
        bus_a.subscribe(f"frota/v1/{A}/ack")
        bus_b.subscribe(f"frota/v1/{A}/ack")  # allowed to ask, never delivered
        bus_b.subscribe(f"frota/v1/{B}/ack")
        collector.publish(f"frota/v1/{A}/ack", b"for A")
        collector.publish(f"frota/v1/{B}/ack", b"for B")
        assert _next(bus_a) == (f"frota/v1/{A}/ack", b"for A")
        assert _next(bus_b) == (f"frota/v1/{B}/ack", b"for B")
        # A bus cannot forge acks, not even on its own ack topic.
        bus_b.publish(f"frota/v1/{A}/ack", b"forged ack")
        bus_b.publish(f"frota/v1/{B}/ack", b"forged ack")
        collector.publish(f"frota/v1/{A}/ack", b"second for A")
        collector.publish(f"frota/v1/{B}/ack", b"second for B")
        assert _next(bus_a) == (f"frota/v1/{A}/ack", b"second for A")
        assert _next(bus_b) == (f"frota/v1/{B}/ack", b"second for B")


def test_client_id_takeover_fails() -> None:
    with provisioned_broker() as running, connected(running, COLLECTOR, COLLECTOR) as collector:
        collector.subscribe("frota/v1/+/up")
        with connected(running, A, f"frota-{A}") as bus_a:
            # B's credentials with the collector's and A's client ids: the broker uses B's
            # username as its client id, so neither session is taken over.
            # (Both logins are client "XYZ9K88" for the broker, so they are made one after the
            # other: the second would take over the first, B's own session.)
            for stolen in (COLLECTOR, f"frota-{A}"):
                with connected(running, B, stolen) as thief:
                    thief.publish(f"frota/v1/{B}/up", stolen.encode())
                    assert _next(collector) == (f"frota/v1/{B}/up", stolen.encode())
            bus_a.publish(f"frota/v1/{A}/up", b"from A")
            assert _next(collector) == (f"frota/v1/{A}/up", b"from A")
            assert not collector.disconnected.is_set()
            assert not bus_a.disconnected.is_set()


def test_a_revoked_bus_cannot_log_in() -> None:
    with provisioned_broker() as running:
        provisioning.revoke(running.fleet, B)
        running.reload()
        # The reload is asynchronous: retry the login until the broker refuses it (bounded).
        for _ in range(100):
            client = Client(running.port, running.fleet.ca_cert_path, B, running.password(B))
            refused = client.connect().is_failure
            client.close()
            if refused:
                break
        assert refused
        with connected(running, A):
            pass


def test_the_hand_written_password_line_is_what_mosquitto_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without the dynamic security plugin (--acl-file) and without mosquitto_passwd, the $7$
    # PBKDF2-SHA512 line is written by hand: the broker must accept it.
    monkeypatch.setattr(broker_files, "mosquitto_passwd", lambda: None)
    with provisioned_broker(vehicles=(A,), acl_file=True) as running:
        line = (running.fleet.mosquitto / "passwd").read_text()
        assert f"{A}:$7$101$" in line
        with connected(running, A):
            pass


def test_pbkdf2_line_matches_mosquitto_passwd_by_hand() -> None:
    # Worked by hand: mosquitto_passwd -U turned "u1:secret" into this line (salt
    # p+CO+ro8KZvdgL/L); the same salt and password give the same hash.
    import base64

    salt = base64.b64decode("p+CO+ro8KZvdgL/L")
    assert broker_files.pbkdf2_line("u1", "secret", salt) == (
        "u1:$7$101$p+CO+ro8KZvdgL/L$XJOVz/61xknmyJCkcRQSUZacuHZzIwVbJpHt5uko4KHlN7whzFJFPqJ6"
        "SucYx6BzR+UIhtUxGmDVrzp5nctPlQ=="
    )


def test_secret_files_have_no_group_or_other_bits() -> None:
    with provisioned_broker(vehicles=(A,)) as running:
        folder = running.fleet.folder
        secrets = [folder / "ca" / "ca.key", folder / "mosquitto" / "dynamic-security.json",
                   folder / "mosquitto" / "server.key", folder / "collectors" / "main" / "password",
                   folder / "collectors" / "main" / "signing.key",
                   folder / "vehicles" / A / "password", folder / "vehicles" / A / "signing.key",
                   folder / "provision" / "password"]
        for path in secrets:
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path


def test_passwords_in_urls_are_masked_in_logs() -> None:
    from protocols.uplink import mask_url

    assert mask_url("mqtts://bus:s3cret@broker.example:8883") == "mqtts://bus:***@broker.example:8883"
    assert mask_url("mqtt://127.0.0.1:1883") == "mqtt://127.0.0.1:1883"
