"""Shared fixtures: a private Mosquitto, PostgreSQL, the corpora."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from collector.store import Store, open_store
from frota.harness.postgres import private_schema
from tests.services import CORPORA, Mosquitto, mosquitto_binary, postgres_available, require

# Property tests judge what the code answers, never how fast: Hypothesis's default 200 ms deadline
# per example (and its too-slow health check) is a timed assertion that fails on a loaded machine.
settings.register_profile("frota", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("frota")


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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store's URL: a SQLite file, or a private schema in PostgreSQL."""
    if request.param == "sqlite":
        yield str(tmp_path / "collector.db")
        return
    dsn: str = request.getfixturevalue("postgres_dsn")
    with private_schema(dsn) as (url, _):
        yield url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A fresh store (SQLite, then PostgreSQL), closed after the test."""
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def corpora() -> Path:
    """../shared/corpora, which tests read and never copy."""
    require(CORPORA.is_dir(), f"the shared corpora are missing at {CORPORA}")
    return CORPORA
