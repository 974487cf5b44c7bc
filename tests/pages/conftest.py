"""A collector's HTTP server (API and pages) over the scenario store, on a real uvicorn socket."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from collector import tokens
from collector.http import Access, make_app
from collector.ingest import Ingest
from collector.rules.profile import load_profiles
from collector.store import Store, open_store
from collector.web.context import RegistryFile, Web
from collector.web.export import BundleSigner
from protocols import identity
from tests.pages.fleet import OPERATORS, build
from tests.services import serve_app


@dataclass
class Server:
    """A running collector HTTP server and what the tests need to call it."""

    base: str
    tokens_file: Path
    store: Store
    registry: Path

    def token(self, role: str, operator: str | None = None) -> str:
        return tokens.add(self.tokens_file, role, operator)[1]

    def get(self, path: str, token: str | None = None,
            headers: dict[str, str] | None = None) -> httpx.Response:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        return httpx.get(self.base + path, headers=sent, timeout=30)

    def post(self, path: str, token: str | None = None, **kw: object) -> httpx.Response:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.post(self.base + path, headers=headers, timeout=30, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def scenario_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The scenario store, built once: (database, registry)."""
    return build(tmp_path_factory.mktemp("scenarios"))


def _serve(folder: Path, scenario_store: tuple[Path, Path],
           signer: BundleSigner | None = None) -> Iterator[Server]:
    db = folder / "collector.db"
    shutil.copy(scenario_store[0], db)
    registry = scenario_store[1]
    store = open_store(str(db))
    ingest = Ingest(store, lambda: frozenset(OPERATORS))
    tokens_file = folder / "tokens.json"
    access = Access(tokens.Tokens(tokens_file), lambda: dict(OPERATORS))
    web = Web(store, RegistryFile(registry), load_profiles(), ingest, lambda: dict(OPERATORS),
              signer=signer)
    app = make_app(ingest, lambda: frozenset(OPERATORS), access=access,
                   allowed_hosts=["127.0.0.1", "localhost"], web=web)
    try:
        with serve_app(app) as base:
            yield Server(base, tokens_file, store, registry)
    finally:
        store.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory,
           scenario_store: tuple[Path, Path]) -> Iterator[Server]:
    """A server shared by a module's read-only tests."""
    yield from _serve(tmp_path_factory.mktemp("server"), scenario_store)


def fleet_signer(not_before: dt.datetime | None = None) -> tuple[BundleSigner, x509.Certificate]:
    """A fleet CA and a collector's certified Ed25519 key (as ``frota provision`` makes them),
    as a bundle signer; and the CA certificate. Valid from now, or from ``not_before`` for a
    bundle made at an earlier time (its ``created`` must lie within them, docs/trust.md)."""
    ca_key, ca_cert = identity.make_ca("Frota test fleet CA", not_before=not_before)
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(ca_key, ca_cert, "central", "collector", key.public_key(),
                                        not_before=not_before)
    signer = BundleSigner("central", identity.key_id(key.public_key()),
                          identity.cert_pem(cert).decode(), identity.cert_pem(ca_cert).decode(),
                          key.sign)
    return signer, ca_cert


@pytest.fixture
def signed_server(tmp_path: Path, scenario_store: tuple[Path, Path]) -> Iterator[Server]:
    """A server whose bundles are signed by a collector key of a fresh fleet CA."""
    yield from _serve(tmp_path, scenario_store, fleet_signer()[0])


@pytest.fixture
def own_server(tmp_path: Path, scenario_store: tuple[Path, Path]) -> Iterator[Server]:
    """A server of the test's own (for tests that store something)."""
    yield from _serve(tmp_path, scenario_store)
