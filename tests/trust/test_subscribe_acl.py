"""A bus's credentials may subscribe only to its own ``ack`` topic: the provisioned broker refuses
(SUBACK failure) its SUBSCRIBE to the collectors' shared-subscription group, to another bus's
``ack`` and to ``#``, while the collectors' group keeps receiving every batch.

Mosquitto 2's ``acl_file`` grants every SUBSCRIBE (it checks only deliveries), so a bus that joined
``$share/<group>/frota/v1/+/up`` took its round-robin share of every bus's batches and dropped them;
provisioning writes the dynamic security plugin's roles instead, whose ``subscribePattern`` ACLs are
checked on SUBSCRIBE (docs/trust.md, docs/deployment.md).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from frota.cli import main
from frota.provision import dynsec, live
from frota.provision import fleet as provisioning
from protocols.evaluated import EVALUATED_TOPIC
from protocols.uplink import up_subscription, up_topic
from tests.trust.broker import Client, connected, provisioned_broker
from tests.trust.test_shared_provisioned import _member

pytestmark = pytest.mark.mosquitto

A, B = "ABC1D23", "XYZ9K88"


def test_a_bus_cannot_subscribe_beyond_its_own_ack() -> None:
    with provisioned_broker((A, B)) as running, connected(running, B) as bus_b:
        for topic in (up_subscription("frota"), up_subscription(), f"frota/v1/{A}/ack",
                      f"frota/v1/{A}/up", "#", "frota/#", "$share/frota/#"):
            assert bus_b.suback(topic).is_failure, topic
        assert not bus_b.suback(f"frota/v1/{B}/ack").is_failure


def test_the_collectors_group_gets_every_batch_while_a_bus_tries_to_join_it() -> None:
    with provisioned_broker((A, B)) as running:
        for name in ("one", "two"):
            provisioning.add_collector(running.fleet, name)
        running.reload()  # a restart: the broker reads the new logins (docs/trust.md)
        one: list[bytes] = []
        two: list[bytes] = []
        members = [_member(running, "collector-one", one), _member(running, "collector-two", two)]
        try:
            with connected(running, B) as bus_b:
                assert bus_b.suback(up_subscription("frota")).is_failure
                with connected(running, A) as bus_a:
                    for i in range(12):
                        bus_a.publish(up_topic(A), str(i).encode())
                    deadline = time.monotonic() + 30  # a bound on the wait, not a timed check
                    while len(one) + len(two) < 12 and time.monotonic() < deadline:
                        time.sleep(0.05)
            assert bus_b.messages.empty()
        finally:
            for member in members:
                member.stop()
    # Every batch reached exactly one collector of the group; none went to the bus.
    assert sorted(int(p) for p in one + two) == list(range(12))


def test_with_the_acl_file_a_bus_can_still_join_the_group() -> None:
    # The known limit of a fleet provisioned with --acl-file (or before the dynamic security
    # plugin): Mosquitto's acl_file grants every SUBSCRIBE, so the bus becomes a member of the
    # collectors' group (docs/deployment.md). Deliveries are still checked: it reads nothing.
    with provisioned_broker((A, B), acl_file=True) as running, connected(running, B) as bus_b:
        assert not bus_b.suback(up_subscription("frota")).is_failure
        assert not bus_b.suback("#").is_failure


def test_frota_provision_dynsec_moves_an_acl_file_fleet_to_the_plugin() -> None:
    with provisioned_broker((A, B), acl_file=True) as running:
        assert main(["provision", "dynsec", str(running.fleet.folder)]) == 0
        running.fleet = provisioning.load(running.fleet.folder)
        conf = (running.fleet.mosquitto / "mosquitto.conf").read_text()
        assert "password_file" not in conf
        assert "acl_file" not in conf
        assert "use_username_as_clientid true" in conf  # the other lines are kept
        running.reload()  # a restart, now that the fleet uses the plugin
        with connected(running, B) as bus_b, connected(running, "collector-main") as collector:
            assert bus_b.suback(up_subscription("frota")).is_failure
            assert bus_b.suback("#").is_failure
            assert not bus_b.suback(f"frota/v1/{B}/ack").is_failure
            assert not collector.suback(up_subscription("frota")).is_failure
            bus_b.publish(up_topic(B), b"still writes its own")
            assert collector.messages.get(timeout=10) == (up_topic(B), b"still writes its own")
        provisioning.revoke(running.fleet, A)  # a revoked bus's login is gone after the move
        running.reload()
        refused = Client(running.port, running.fleet.ca_cert_path, A, running.password(A))
        assert refused.connect().is_failure
        refused.close()


def test_frota_provision_apply_changes_the_running_broker_without_a_restart() -> None:
    c = "JKL3M45"
    with provisioned_broker((A, B)) as running:
        pid = running.proc.pid
        with connected(running, B) as bus_b:
            provisioning.add_vehicle(running.fleet, c, "/tmp/unused.sqlite")
            provisioning.revoke(running.fleet, B)
            before = (running.fleet.dynsec_path).read_text()
            assert main(["provision", "apply", str(running.fleet.folder)]) == 0
            # The plugin disconnects the revoked bus at once.
            assert bus_b.disconnected.wait(10)
        assert running.proc.pid == pid  # no restart
        assert running.proc.poll() is None
        refused = Client(running.port, running.fleet.ca_cert_path, B, running.password(B))
        assert refused.connect().is_failure
        refused.close()
        with connected(running, c) as bus_c, connected(running, "collector-main") as collector:
            # The new bus has its role, no more: its own ack, nothing of the collectors'.
            assert bus_c.suback(up_subscription("frota")).is_failure
            assert not bus_c.suback(f"frota/v1/{c}/ack").is_failure
            assert not collector.suback(up_subscription()).is_failure
            bus_c.publish(up_topic(c), b"new bus")
            assert collector.messages.get(timeout=10) == (up_topic(c), b"new bus")
        # The file the next start reads is still provisioning's (the broker rewrote it after
        # each command); a second apply has nothing to do.
        assert running.fleet.dynsec_path.read_text() == before
        assert main(["provision", "apply", str(running.fleet.folder)]) == 0
        running.reload()  # and a restart keeps the same logins
        with connected(running, c):
            pass
        refused = Client(running.port, running.fleet.ca_cert_path, B, running.password(B))
        assert refused.connect().is_failure
        refused.close()


def test_frota_provision_apply_puts_back_what_was_changed_by_hand(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Someone with provisioning's login changed the running broker by hand: bus A's role may
    # subscribe to everything, the collectors' role lost its shared subscription, bus B was
    # given the collectors' role directly and through a group, and subscribing is allowed by
    # default. Every name is still there: apply compares content and puts each back.
    with provisioned_broker((A, B)) as running:
        fleet = running.fleet
        password = fleet.login_files()[dynsec.ADMIN_USER].read_text()
        by_hand: list[dict[str, Any]] = [
            {"command": "addRoleACL", "rolename": dynsec.VEHICLE_ROLE_PREFIX + A,
             "acltype": "subscribePattern", "topic": "#", "priority": 0, "allow": True},
            {"command": "removeRoleACL", "rolename": dynsec.COLLECTOR_ROLE,
             "acltype": "subscribePattern", "topic": "$share/+/frota/v1/+/up"},
            {"command": "addClientRole", "username": B, "rolename": dynsec.COLLECTOR_ROLE},
            {"command": "createGroup", "groupname": "extra",
             "roles": [{"rolename": dynsec.COLLECTOR_ROLE}]},
            {"command": "addGroupClient", "groupname": "extra", "username": A},
        ]
        default_subscribe = {"command": "setDefaultACLAccess",
                             "acls": [{"acltype": "subscribe", "allow": True}]}
        with live._Control(fleet.broker_url, fleet.ca_cert_path, password, 10) as control:
            assert [a.get("error") for a in control.call(by_hand)] == [None] * 5
            with connected(running, A) as bus_a, connected(running, B) as bus_b, \
                    connected(running, "collector-main") as collector:
                # the changes by hand took effect
                assert not bus_a.suback("#").is_failure
                assert not bus_b.suback(up_subscription()).is_failure
                assert collector.suback(up_subscription("frota")).is_failure
                assert bus_b.suback("elsewhere").is_failure
                assert control.call([default_subscribe])[0].get("error") is None
                assert not bus_b.suback("elsewhere").is_failure
        assert main(["provision", "apply", str(fleet.folder)]) == 0
        assert capsys.readouterr().out.endswith(
            "0 added (none), 0 removed (none), 5 put back as provisioned (role frota-collector, "
            "role frota-vehicle-ABC1D23, group extra, login XYZ9K88, default access)\n")
        with connected(running, A) as bus_a, connected(running, B) as bus_b, \
                connected(running, "collector-main") as collector:
            for bus in (bus_a, bus_b):
                for topic in ("#", "frota/v1/+/up", up_subscription("frota"), "elsewhere"):
                    assert bus.suback(topic).is_failure, topic
            assert not bus_a.suback(f"frota/v1/{A}/ack").is_failure
            assert not collector.suback(up_subscription("frota")).is_failure
        assert live.apply(fleet) == live.Applied()  # nothing left to put back


def test_collectors_write_and_read_the_evaluation_notices_and_buses_cannot() -> None:
    # protocols/evaluated.py: each collector announces its live evaluations on one topic that
    # the collectors' monitors (frota sim fleet, bench.fleet) read; a bus has no business there.
    with provisioned_broker((A, B)) as running:
        provisioning.add_collector(running.fleet, "one")
        running.reload()
        with connected(running, "collector-one") as collector, connected(running, B) as bus_b:
            assert not collector.suback(EVALUATED_TOPIC).is_failure
            assert bus_b.suback(EVALUATED_TOPIC).is_failure
            collector.publish(EVALUATED_TOPIC, b"notice")
            assert collector.messages.get(timeout=10) == (EVALUATED_TOPIC, b"notice")
