"""The collector process: store + fleet registry + MQTT ingest + HTTP API and pages, started and
stopped together."""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import uvicorn

from collector import compaction, registry, retention
from collector.config import CollectorConfig
from collector.findings import LiveFindings
from collector.http import Access, make_app
from collector.ingest import Ingest
from collector.signer import AckSigner
from collector.store import Store, open_store
from collector.tokens import Tokens
from collector.verifier import ChainVerifier
from collector.web.context import RegistryFile, Web
from collector.web.export import BundleSigner
from protocols.uplink import mask_url

log = logging.getLogger(__name__)
#: Seconds of each daily compaction run spent giving days compacted before migration
#: 017_disc_summary their disc summary (collector/disc_summary.py, newest first).
SUMMARY_BUDGET_S = 600.0


class FleetVehicles:
    """The registry's vehicle ids, reloaded when the file changes (checked every ``recheck_s``).

    A registry that becomes invalid while running keeps the last good one (and says so in the log).
    """

    def __init__(self, path: Path, recheck_s: float = 1.0,
                 on_added: Callable[[frozenset[str]], object] | None = None) -> None:
        self.path = path
        self.recheck_s = recheck_s
        #: Called (outside the lock) with the vehicle ids a reload added (collector/ingest.py
        #: tells their agents to send their retryable rejects again).
        self.on_added = on_added
        self._lock = threading.Lock()
        self._mtime = os.stat(path).st_mtime_ns
        self._ids, self._operators = self._read()
        self._checked = time.monotonic()

    def _read(self) -> tuple[frozenset[str], dict[str, str | None]]:
        vehicles = registry.load(self.path).vehicles
        return frozenset(vehicles), {v.id: v.operator for v in vehicles.values()}

    def watch(self, stop: threading.Event) -> threading.Thread:
        """A thread that checks the file every ``recheck_s`` until ``stop`` (so an added
        vehicle is announced even while no batch nor request arrives)."""
        def run() -> None:
            while not stop.wait(self.recheck_s):
                self()

        thread = threading.Thread(target=run, name="registry-watch", daemon=True)
        thread.start()
        return thread

    def operators(self) -> dict[str, str | None]:
        """Each vehicle's operator (``vehicles[].operator``), as of the last reload."""
        self()
        return self._operators

    def __call__(self) -> frozenset[str]:
        """The current set of vehicle ids."""
        now = time.monotonic()
        if now - self._checked < self.recheck_s:
            return self._ids
        added: frozenset[str] = frozenset()
        with self._lock:
            self._checked = now
            try:
                mtime = os.stat(self.path).st_mtime_ns
                if mtime != self._mtime:
                    self._mtime = mtime
                    before = self._ids
                    self._ids, self._operators = self._read()
                    added = self._ids - before
                    log.info("fleet registry reloaded: %d vehicles", len(self._ids))
            except (OSError, registry.RegistryError) as err:
                log.error("fleet registry not reloaded, keeping the previous one: %s", err)
            ids = self._ids
        if added and self.on_added is not None:
            try:
                self.on_added(added)
            except Exception:  # telling the agents must never stop the caller (the ingest)
                log.exception("registry: the agents of %s were not told", sorted(added))
        return ids


class _Server(uvicorn.Server):
    """uvicorn's server, except that SIGTERM/SIGINT end ``run()`` normally instead of being
    re-raised after the shutdown, so the collector closes its MQTT session and store and exits 0."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Ask the server to stop (a second SIGINT forces it)."""
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


class StartError(RuntimeError):
    """The collector cannot start as configured (its HTTP port is taken); the message says why."""


def listen(host: str, port: int) -> socket.socket:
    """The HTTP socket, bound (uvicorn listens on it); StartError when the port is taken.

    Bound before anything else starts, so a collector that cannot serve HTTP neither connects to
    the broker (taking another collector's session) nor creates a database.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise StartError(f"http: cannot listen on {host}:{port}: the port is already in use "
                             "(another collector running? change http.port)") from err
        reason = err.strerror or str(err)
        raise StartError(f"http: cannot listen on {host}:{port}: {reason}") from err
    return sock


def daily_prune(store: Store, config: CollectorConfig) -> retention.DailyPrune:
    """The daily prune of a running collector (registry and profiles read at each run)."""
    from collector.rules.profile import load_profiles

    def once() -> list[retention.VehiclePrune]:
        return retention.prune(store, registry.load(config.registry), load_profiles(),
                               config.retention.keep_days, now_ms=retention.now_day_ms(),
                               batch_rows=config.retention.batch_rows)

    return retention.DailyPrune(once, store)


def daily_compaction(store: Store, config: CollectorConfig) -> compaction.DailyCompaction:
    """The daily compaction of a running collector (registry and profiles read at each run)."""
    from collector.rules.profile import load_profiles

    def once() -> list[compaction.DayCompacted]:
        profiles = load_profiles()
        done = compaction.compact(store, registry.load(config.registry), profiles,
                                  now_ms=retention.now_day_ms(),
                                  after_days=config.retention.compact_after_days)
        # days compacted before their disc summary existed: ten minutes of them a day
        summarized, left = compaction.summarize_missing(store, profiles,
                                                        budget_s=SUMMARY_BUDGET_S)
        if summarized or left:
            log.info("compact: summarized %d vehicle-days compacted without a disc summary, "
                     "%d left", summarized, left)
        rebuilt = compaction.rebuild_minutes(store, profiles)  # rows from before migration 020
        if rebuilt:
            log.info("compact: summarized the rows of %d vehicles per minute", rebuilt)
        return done

    return compaction.DailyCompaction(once, store)


def run(config: CollectorConfig) -> int:
    """Run the collector until SIGINT/SIGTERM; return the exit status."""
    sock = listen(config.http.host, config.http.port)
    try:
        return _run(config, sock)
    finally:
        sock.close()


#: Seconds a thread holding the interpreter runs before another waiting one takes it
#: (``sys.setswitchinterval``; Python's default 0.005). The live evaluation is CPU-bound for
#: hundreds of ms; the MQTT thread gives the interpreter up at every socket read and waits
#: this long to get it back each time, so with a batch every few ms it would read a batch per
#: switch while an evaluation runs (docs/deployment.md, "Measured on the development machine").
SWITCH_INTERVAL_S = 0.001


def _run(config: CollectorConfig, sock: socket.socket) -> int:
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    vehicles = FleetVehicles(config.registry)
    trust = config.trust
    signer = (  # before the store is opened: a bad key file stops the start with nothing open
        AckSigner(trust.key_file, trust.cert_file, trust.ca_file) if trust is not None else None
    )
    store: Store = open_store(
        config.database.url,
        synchronous=config.database.synchronous,
        rejects_max_bytes=config.database.rejects_max_bytes,
    )
    ingest = Ingest(
        store, vehicles, max_payload_bytes=config.ingest.max_payload_bytes, signer=signer,
        readers=config.ingest.reader_processes(),
        read_limit_s=config.ingest.read_limit_s,
    )
    vehicles.on_added = ingest.announce  # a vehicle added: its agents replay their rejects
    watching = threading.Event()
    access = None
    if config.http.tokens_file is not None:
        access = Access(Tokens(config.http.tokens_file), vehicles.operators)
    else:
        log.warning("http.tokens_file is not set: the API on %s is open to anyone who can reach "
                    "it (loopback only)", config.http.host)
    # the rules, live (collector/findings.py); each evaluation announced (protocols/evaluated.py);
    # on a shared PostgreSQL store, each partition under a lease (collector/live_leases.py),
    # this process the holder
    live = LiveFindings(store, config.registry, on_evaluated=ingest.publish_evaluated,
                        lease_s=config.findings.lease_s,
                        max_delay_s=config.findings.max_delay_s,
                        holder=f"{config.broker.client_id}@{socket.gethostname()}:{os.getpid()}")
    web = Web(store, RegistryFile(config.registry), live.profiles, ingest, vehicles.operators,
              stale_after_s=config.ingest.stale_after_s,
              signer=None if signer is None or trust is None else BundleSigner(
                  signer.name, signer.key_id, signer.cert_pem, trust.ca_file.read_text(),
                  signer.key.sign))
    app = make_app(
        ingest,
        vehicles,
        stale_after_s=config.ingest.stale_after_s,
        access=access,
        allowed_hosts=config.http.allowed_hosts,
        web=web,
    )
    server = _Server(
        uvicorn.Config(
            app,
            host=config.http.host,
            port=config.http.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
    )
    log.info(
        "collector: broker %s, database %s, registry %s (%d vehicles), http://%s:%d",
        mask_url(config.broker.url),
        store.location,
        config.registry,
        len(vehicles()),
        config.http.host,
        config.http.port,
    )
    try:
        ingest.connect(config.broker)
    except Exception:
        store.close()
        raise
    live.start()
    vehicles.watch(watching)
    pruner = None
    if config.retention.daily:  # the same prune as frota collector prune, once a day
        pruner = daily_prune(store, config)
        pruner.start()
    compactor = None
    if config.retention.compact_daily:  # the same as frota collector compact, once a day
        compactor = daily_compaction(store, config)
        compactor.start()
    verifier = None
    if trust is not None:  # the chains and checkpoints, live (collector/verifier.py)
        verifier = ChainVerifier(store, trust.ca_file, trust.keyring)
        verifier.start()
    try:
        server.run(sockets=[sock])
    finally:
        watching.set()
        ingest.close()
        if verifier is not None:
            verifier.stop()
        if pruner is not None:
            pruner.stop()
        if compactor is not None:
            compactor.stop()
        live.stop()
        store.close()
    return 0 if server.started else 1
