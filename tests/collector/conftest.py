"""Fixtures shared by the collector's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.collector.helpers import AgentSide
from tests.services import Mosquitto


@pytest.fixture
def agent(mosquitto: Mosquitto) -> Iterator[AgentSide]:
    """The test's publisher and ack listener on the test's private broker."""
    side = AgentSide(mosquitto.port)
    try:
        yield side
    finally:
        side.close()
