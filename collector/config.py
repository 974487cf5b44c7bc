"""The collector's configuration file (TOML): broker, database, registry, HTTP; validated at start.

Every key is documented in ``docs/collector.md``; ``collector/collector.example.toml`` is a
complete example. A bad file is refused with one line naming the key and what is wrong.
Relative paths are taken from the directory of the configuration file.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from collector.readers import READ_LIMIT_S
from protocols.uplink import MAX_PAYLOAD_BYTES, check_broker_url, up_subscription

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLSConfig(_Strict):
    """TLS settings for ``mqtts://`` brokers."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    #: Skip the broker's hostname check (never in production).
    insecure: bool = False


class BrokerConfig(_Strict):
    """Where and how the collector connects to MQTT."""

    url: str = "mqtt://127.0.0.1:1883"
    client_id: Annotated[str, Field(min_length=1, max_length=128)] = "frota-collector"
    username: str | None = None
    password: str | None = None
    #: A file holding the password (mode 0600), instead of ``password``.
    password_file: Path | None = None
    #: Seconds; the agent's key has the same name (``keepalive`` is read as it, with a warning).
    keepalive_s: Annotated[int, Field(ge=5, le=3600)] = 30
    tls: TLSConfig = TLSConfig()
    #: Several collectors share ingest: each batch goes to ONE collector of this MQTT 5
    #: shared-subscription group (``$share/GROUP/frota/v1/+/up``, docs/deployment.md). None
    #: (the default): this collector reads every batch, as one collector alone does.
    share_group: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_broker_url(value)

    @field_validator("share_group")
    @classmethod
    def _share_group(cls, value: str | None) -> str | None:
        if value is not None:
            up_subscription(value)  # ValueError names what is wrong
        return value

    @property
    def host(self) -> str:
        """The broker's host name."""
        return urlsplit(self.url).hostname or ""

    def secret(self) -> str | None:
        """The password: ``password``, else the content of ``password_file``."""
        if self.password is not None or self.password_file is None:
            return self.password
        return self.password_file.read_text(encoding="utf-8").strip()

    @property
    def port(self) -> int:
        """The broker's port (1883 for mqtt://, 8883 for mqtts:// unless given)."""
        return urlsplit(self.url).port or (8883 if self.uses_tls else 1883)

    @property
    def uses_tls(self) -> bool:
        """True for ``mqtts://``."""
        return urlsplit(self.url).scheme == "mqtts"


class DatabaseConfig(_Strict):
    """The store: a SQLite file (the default) or a PostgreSQL DSN."""

    path: Path | None = None
    dsn: str | None = None
    #: SQLite only: ``full`` makes a committed (so acknowledged) batch survive a power cut.
    synchronous: Literal["full", "normal"] = "full"
    #: Bound on the payload bytes kept in ``rejects`` (MiB); past it the oldest payloads are
    #: dropped, each row keeping its reason, metadata and the dropped size.
    rejects_max_mb: Annotated[float, Field(gt=0)] = 1024.0

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("postgresql", "postgres"):
            raise ValueError(f"{value!r} must start with postgresql://")
        return value

    @property
    def rejects_max_bytes(self) -> int:
        """``rejects_max_mb`` in bytes."""
        return int(self.rejects_max_mb * 1024 * 1024)

    @property
    def url(self) -> str:
        """What :func:`collector.store.open_store` takes: the DSN or the SQLite path."""
        if self.dsn is not None:
            return self.dsn
        return str(self.path if self.path is not None else Path("collector.db"))


class HTTPConfig(_Strict):
    """Where the HTTP API (``/health``, ``/records``) listens, and who may use it."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    #: API tokens, hashed (``frota collector token add``); None: the API is open (tests, demo
    #: without provisioning) and says so in the log.
    tokens_file: Path | None = None
    #: Host header values accepted (host names, without port); empty: any.
    allowed_hosts: tuple[str, ...] = ()


class TrustConfig(_Strict):
    """The fleet's trust material (``frota provision``): CA, keyring, the collector's own key."""

    ca_file: Path
    keyring: Path
    key_file: Path
    cert_file: Path


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: taskset, systemd's CPUAffinity=,
    docker --cpuset-cpus), not the machine's (``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def default_readers() -> int:
    """Reader processes when ``ingest.readers`` is not set: one where the collector may run on
    two cores or more (the commits keep a core), none on one (read in the MQTT client's
    thread)."""
    return 1 if usable_cores() >= 2 else 0


class IngestConfig(_Strict):
    """Limits of the ingest loop."""

    #: Largest payload accepted (bytes on the wire); never above the protocol's limit.
    max_payload_bytes: Annotated[int, Field(ge=1024, le=MAX_PAYLOAD_BYTES)] = MAX_PAYLOAD_BYTES
    #: Seconds without news after which an agent that said ``online`` is shown as ``stale``.
    stale_after_s: Annotated[float, Field(gt=0)] = 300.0
    #: Processes that read the batches beside the commits (collector/readers.py); 0: read in
    #: the MQTT client's thread. Not set: one on a machine with two cores or more, else 0.
    readers: Annotated[int, Field(ge=0, le=16)] | None = None
    #: Seconds a reader process may take over one batch: past it, its processes are killed and
    #: the batch read again alone; past it twice, the batch is rejected (collector/readers.py).
    read_limit_s: Annotated[float, Field(gt=0, le=3600)] = READ_LIMIT_S

    def reader_processes(self) -> int:
        """``readers``, or the default for this machine."""
        return default_readers() if self.readers is None else self.readers


class RetentionConfig(_Strict):
    """How long records are kept (``collector/retention.py``): the law's minimum is each
    profile's; ``keep_days`` may be longer, never shorter (refused at start, with the article)."""

    #: Whole days kept, counted in the vehicle's profile's zone from the record's device time;
    #: None: each profile's minimum.
    keep_days: Annotated[int, Field(ge=1)] | None = None
    #: Records deleted per transaction (the ingest waits at most one batch).
    batch_rows: Annotated[int, Field(ge=1, le=100_000)] = 1000
    #: Prune once a day inside the running collector.
    daily: bool = True
    #: Whole local days a vehicle-day stays as rows before it is compacted into one row
    #: (collector/compaction.py: on local day T, the days D with T - D > this).
    compact_after_days: Annotated[int, Field(ge=1)] = 2
    #: Compact once a day inside the running collector.
    compact_daily: bool = True


class FindingsConfig(_Strict):
    """The live rules (``collector/findings.py``) with several collectors on one PostgreSQL
    store (``collector/live_leases.py``, docs/deployment.md)."""

    #: Seconds an evaluation lease lasts unrenewed: a dead collector's partitions are taken
    #: over within about this (plus the survivors' next evaluation, at most a third of it).
    lease_s: Annotated[float, Field(ge=3, le=600)] = 30.0
    #: Seconds at most from a record stored to the start of the live evaluation that judges it
    #: under a steady stream (collector/findings.py ``max_delay_s``).
    max_delay_s: Annotated[float, Field(ge=0.1, le=60)] = 0.5


class CollectorConfig(_Strict):
    """The whole configuration file."""

    registry: Path
    broker: BrokerConfig = BrokerConfig()
    database: DatabaseConfig = DatabaseConfig()
    http: HTTPConfig = HTTPConfig()
    ingest: IngestConfig = IngestConfig()
    trust: TrustConfig | None = None
    retention: RetentionConfig = RetentionConfig()
    findings: FindingsConfig = FindingsConfig()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] | None = None


def _resolve(base: Path, path: Path | None) -> Path | None:
    if path is None:
        return None
    path = path.expanduser()
    return path if path.is_absolute() else base / path


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "missing (required)"
    message = message.removeprefix("Value error, ")
    return f"{key}: {message}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: Keys renamed, still read under their old names (with a warning): (section, old, new).
DEPRECATED_KEYS = (("broker", "keepalive", "keepalive_s"),)


def _rename_deprecated(raw: dict[str, Any], name: str) -> None:
    """Read an old key name as the new one, saying so; both at once is an error."""
    for section, old, new in DEPRECATED_KEYS:
        table = raw.get(section)
        if not isinstance(table, dict) or old not in table:
            continue
        if new in table:
            raise ConfigError(f"{name}: {section}.{old}: give {section}.{new} only (the same key)")
        table[new] = table.pop(old)
        log.warning("%s: %s.%s is deprecated, call it %s.%s (as the agent's configuration does)",
                    name, section, old, section, new)


def parse_config(text: str, base: Path, name: str = "collector.toml") -> CollectorConfig:
    """Parse and validate TOML text; relative paths are resolved against ``base``."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{name}: not valid TOML: {err}") from err
    _rename_deprecated(raw, name)
    try:
        config = CollectorConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(f"{name}: {_describe(err)}") from err
    if config.database.path is not None and config.database.dsn is not None:
        raise ConfigError(f"{name}: database: give path or dsn, not both")
    tls = config.broker.tls
    if (tls.cert_file is None) != (tls.key_file is None):
        raise ConfigError(f"{name}: broker.tls: cert_file and key_file go together")
    if config.broker.password is not None and config.broker.username is None:
        raise ConfigError(f"{name}: broker.password: given without broker.username")
    if config.http.tokens_file is None and not _loopback(config.http.host):
        raise ConfigError(
            f"{name}: http.tokens_file: required when http.host is not a loopback address "
            "(every route then needs an API token)"
        )
    if config.broker.password is not None and config.broker.password_file is not None:
        raise ConfigError(f"{name}: broker.password_file: give password or password_file, not both")
    resolved_tls = tls.model_copy(
        update={
            "ca_file": _resolve(base, tls.ca_file),
            "cert_file": _resolve(base, tls.cert_file),
            "key_file": _resolve(base, tls.key_file),
        }
    )
    database = config.database
    if database.dsn is None:
        database = database.model_copy(
            update={"path": _resolve(base, database.path or Path("collector.db"))}
        )
    trust = config.trust
    if trust is not None:
        trust = trust.model_copy(
            update={k: _resolve(base, getattr(trust, k))
                    for k in ("ca_file", "keyring", "key_file", "cert_file")}
        )
    http = config.http.model_copy(update={"tokens_file": _resolve(base, config.http.tokens_file)})
    return config.model_copy(
        update={
            "registry": _resolve(base, config.registry),
            "broker": config.broker.model_copy(
                update={"tls": resolved_tls,
                        "password_file": _resolve(base, config.broker.password_file)}
            ),
            "database": database,
            "trust": trust,
            "http": http,
        }
    )


def load_config(path: Path) -> CollectorConfig:
    """Read and validate a configuration file; ConfigError with a one-line reason otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text") from err
    config = parse_config(text, path.resolve().parent, path.name)
    for key, file in (
        ("registry", config.registry),
        ("broker.tls.ca_file", config.broker.tls.ca_file),
        ("broker.tls.cert_file", config.broker.tls.cert_file),
        ("broker.tls.key_file", config.broker.tls.key_file),
        ("broker.password_file", config.broker.password_file),
        ("trust.ca_file", config.trust.ca_file if config.trust else None),
        ("trust.key_file", config.trust.key_file if config.trust else None),
        ("trust.cert_file", config.trust.cert_file if config.trust else None),
    ):
        if file is not None and not file.is_file():
            raise ConfigError(f"{path.name}: {key}: no such file {file}")
    return config
