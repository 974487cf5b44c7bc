"""``frota agent page --listen`` refuses every interface however it is written (c741fdf refused
``0.0.0.0`` and ``::`` only): the server resolves the host it is given, and ``0``, ``0.0``,
``0x0``, ``000.000.000.000`` resolve to 0.0.0.0, ``::ffff:0.0.0.0`` to every IPv4 interface."""

from __future__ import annotations

import pytest

from agent.roadside_page import listen_address


@pytest.mark.parametrize("text", [
    "0.0.0.0:8080", "[::]:8080", "0:8080", "0.0:8080", "0x0:8080", "000.000.000.000:8080",
    "[0000::0]:8080", "[::ffff:0.0.0.0]:8080", "[::%lo]:8080",
])
def test_every_interface_is_refused_however_written(text: str) -> None:
    with pytest.raises(ValueError, match="every interface"):
        listen_address(text)


@pytest.mark.parametrize(("text", "host"), [
    ("127.0.0.1:8080", "127.0.0.1"), ("192.168.4.1:8080", "192.168.4.1"), ("[::1]:8080", "::1"),
    ("localhost:8080", "localhost"),
])
def test_one_interface_is_taken(text: str, host: str) -> None:
    assert listen_address(text) == (host, 8080)
