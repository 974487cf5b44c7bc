"""Shared fixtures: a private Mosquitto, PostgreSQL, the corpora."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import CORPORA, Mosquitto, mosquitto_binary, postgres_available, require


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    """A private Mosquitto on a free loopback port, stopped after the test."""
    require(mosquitto_binary() is not None, "mosquitto is not installed (apt-get install mosquitto)")
    broker = Mosquitto(tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def postgres_dsn() -> str:
    """The DSN of the test PostgreSQL (127.0.0.1:5432, database test, trust auth)."""
    require(postgres_available(), "PostgreSQL is not running at 127.0.0.1:5432")
    return "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def corpora() -> Path:
    """../shared/corpora, which tests read and never copy."""
    require(CORPORA.is_dir(), f"the shared corpora are missing at {CORPORA}")
    return CORPORA
