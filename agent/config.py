"""The agent's configuration: one TOML file (``frota agent run --config agent.toml``), validated.

Every key is documented in ``firmware-notes/agent-config.md``; ``firmware-notes/agent.example.toml``
is a complete example that the tests load. A bad file is refused with one line naming the key.
"""

from __future__ import annotations

import re
import stat
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from protocols import registry
from protocols.records import is_vehicle_id
from protocols.uplink import check_broker_url


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key and what is wrong."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CounterConfig(_Strict):
    """One door sensor on the RS-485 line: its bus address and the number of the door it counts."""

    address: Annotated[int, Field(ge=1, le=247)]
    door: Annotated[int, Field(ge=0)] | None = None

    @property
    def door_number(self) -> int:
        """The door number in the records (default: the address)."""
        return self.address if self.door is None else self.door


class DeviceConfig(_Strict):
    """One device: its protocol and line settings (serial; CAN for fms)."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    #: A protocol of ``protocols.registry`` that has an agent source.
    protocol: str
    port: Annotated[str, Field(min_length=1)]
    baudrate: Annotated[int, Field(gt=0)] = 115_200
    bytesize: Literal[5, 6, 7, 8] = 8
    parity: Literal["N", "E", "O", "M", "S"] = "N"
    stopbits: float = 1
    silent_after_s: Annotated[float, Field(gt=0)] = 5.0
    reopen_min_s: Annotated[float, Field(gt=0)] = 0.5
    reopen_max_s: Annotated[float, Field(gt=0)] = 30.0
    poll_interval_s: Annotated[float, Field(gt=0)] = 1.0
    reply_timeout_s: Annotated[float, Field(gt=0)] = 0.1
    counters: list[CounterConfig] = Field(default_factory=list)
    #: FMS only: how the CAN bus is reached — ``slcan``, a serial CAN adapter on ``port``
    #: (default), or ``socketcan``, the Linux interface named by ``port`` (``can0``).
    interface: Literal["slcan", "socketcan"] | None = None
    #: FMS only, slcan: the bit rate the adapter is set to (FMS buses run at 250 kbit/s).
    bitrate: Literal[10_000, 20_000, 50_000, 100_000, 125_000, 250_000, 500_000, 750_000,
                     1_000_000] | None = None
    #: FMS only, slcan: seconds to wait after opening the adapter before setting it up
    #: (python-can's ``sleep_after_open``; an adapter that resets when its port opens needs it).
    open_wait_s: Annotated[float, Field(ge=0)] | None = None

    @property
    def device(self) -> str:
        """The records' ``device`` value for this device (from the device registry)."""
        return registry.get(self.protocol).device

    @field_validator("protocol")
    @classmethod
    def _protocol(cls, value: str) -> str:
        known = registry.source_protocols()
        if value not in known:
            raise ValueError(f"{value!r} is not one of {', '.join(map(repr, known))}")
        return value

    @model_validator(mode="after")
    def _check(self) -> DeviceConfig:
        if self.protocol == "apc" and not self.counters:
            raise ValueError("counters: an apc device needs at least one [[devices.counters]]")
        if self.protocol != "apc" and self.counters:
            raise ValueError(f"counters: only apc devices have counters, not {self.protocol}")
        for key in ("interface", "bitrate", "open_wait_s"):
            if self.protocol != "fms" and getattr(self, key) is not None:
                raise ValueError(f"{key}: only fms devices (CAN) have it, not {self.protocol}")
        if self.interface == "socketcan" and (self.bitrate or self.open_wait_s is not None):
            raise ValueError("bitrate: a socketcan link's bit rate is set by systemd-networkd")
        addresses = [c.address for c in self.counters]
        if len(set(addresses)) != len(addresses):
            raise ValueError("counters: two counters share an address")
        doors = [c.door_number for c in self.counters]
        if len(set(doors)) != len(doors):
            raise ValueError("counters: a door number is used twice")
        if self.stopbits not in (1, 1.5, 2):
            raise ValueError(f"stopbits: {self.stopbits} is not 1, 1.5 or 2")
        if self.reopen_max_s < self.reopen_min_s:
            raise ValueError("reopen_max_s: must be >= reopen_min_s")
        return self


class TlsConfig(_Strict):
    """TLS for ``mqtts://``: the CA to trust and, for client certificates, the cert and key."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure: bool = False

    @model_validator(mode="after")
    def _check(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file: cert_file and key_file go together")
        return self


class BrokerConfig(_Strict):
    """The MQTT broker and how to log in."""

    url: str
    client_id: str | None = None
    username: str | None = None
    password: str | None = None
    password_file: Path | None = None
    keepalive_s: Annotated[int, Field(ge=5, le=65535)] = 30
    tls: TlsConfig = Field(default_factory=TlsConfig)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_broker_url(value)

    @model_validator(mode="after")
    def _check(self) -> BrokerConfig:
        if self.password is not None and self.password_file is not None:
            raise ValueError("password_file: give password or password_file, not both")
        return self

    @property
    def tls_enabled(self) -> bool:
        """True for ``mqtts://``."""
        return urlsplit(self.url).scheme == "mqtts"

    @property
    def host(self) -> str:
        """The broker's host name."""
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        """The broker's port (1883 for mqtt://, 8883 for mqtts:// by default)."""
        return urlsplit(self.url).port or (8883 if self.tls_enabled else 1883)

    def credentials(self) -> tuple[str | None, str | None]:
        """Username and password: from the keys, the password file, or the URL's user info."""
        parts = urlsplit(self.url)
        user = self.username or (unquote(parts.username) if parts.username else None)
        password = self.password
        if password is None and self.password_file is not None:
            password = self.password_file.read_text().strip()
        if password is None and parts.password:
            password = unquote(parts.password)
        return user, password


class BufferConfig(_Strict):
    """The durable buffer on the Pi."""

    path: Path
    commit_records: Annotated[int, Field(ge=1, le=100_000)] = 1000
    commit_interval_ms: Annotated[int, Field(ge=1, le=60_000)] = 200
    retention_days: Annotated[int, Field(ge=1)] = 90
    #: A cap on the buffer's size (SQLite ``max_page_count``); past it, as on a full disk.
    max_size_mb: Annotated[float, Field(gt=0)] | None = None
    #: Space kept in a file beside the buffer and given back when the disk is full (MiB).
    reserve_mb: Annotated[float, Field(ge=0)] = 1.0

    @property
    def max_bytes(self) -> int | None:
        """``max_size_mb`` in bytes, or None for no cap (the disk's own size)."""
        return None if self.max_size_mb is None else int(self.max_size_mb * 1024 * 1024)


class IdentityConfig(_Strict):
    """The agent's Ed25519 signing key and its certificate from the fleet CA (frota provision)."""

    key_file: Path
    cert_file: Path
    #: The fleet CA: acknowledgements must be signed by a collector it certified.
    ca_file: Path | None = None


class UplinkConfig(_Strict):
    """How records are batched and sent."""

    batch_records: Annotated[int, Field(ge=1, le=10_000)] = 1000
    batch_interval_ms: Annotated[int, Field(ge=0, le=600_000)] = 1000
    max_in_flight: Annotated[int, Field(ge=1, le=100)] = 16
    ack_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    #: The longest wait for an answer before a batch is sent again: the waits double from
    #: ack_timeout_s while the collector does not answer (agent/flights.py).
    resend_max_s: Annotated[float, Field(gt=0)] = 300.0
    compress: bool = True


class AgentConfig(_Strict):
    """The whole agent configuration."""

    vehicle: str
    devices: list[DeviceConfig] = Field(default_factory=list)
    buffer: BufferConfig
    broker: BrokerConfig
    uplink: UplinkConfig = Field(default_factory=UplinkConfig)
    #: The signing key of the chain checkpoints; None: records are chained but not signed.
    identity: IdentityConfig | None = None

    @field_validator("vehicle")
    @classmethod
    def _vehicle(cls, value: str) -> str:
        if not is_vehicle_id(value):
            raise ValueError(
                f"{value!r} must be 1-64 letters, digits, '_', '.' or '-', starting with a "
                "letter or digit"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        names = [d.name for d in self.devices]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"devices: two devices are named {name!r}")
        for proto in sorted({d.protocol for d in self.devices}):
            if registry.get(proto).clocked and sum(d.protocol == proto for d in self.devices) > 1:
                # Two clocks of one kind would both set the agent's time (TimeKeeper).
                raise ValueError(f"devices: more than one {proto} device")
        return self

    @property
    def counted_doors(self) -> frozenset[int]:
        """The door numbers the RS-485 counters (apc devices) report."""
        return frozenset(c.door_number for d in self.devices if d.protocol == "apc"
                         for c in d.counters)

    @property
    def client_id(self) -> str:
        """The MQTT client id (default ``frota-<vehicle>``)."""
        return self.broker.client_id or f"frota-{self.vehicle}"


def _key(loc: tuple[int | str, ...], data: Any) -> str:
    """A pydantic error location → the TOML key as the user wrote it (``devices[1].parity``)."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
    return out


def _message(err: ValidationError, data: Any) -> str:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    msg = str(first["msg"])
    key = _key(loc, data)
    # A model-level check says which key it is about as "key: what is wrong".
    if msg.startswith("Value error, "):
        msg = msg.removeprefix("Value error, ")
        sub, sep, rest = msg.partition(": ")
        if sep and re.fullmatch(r"[a-z_]+", sub):
            key = f"{key}.{sub}" if key else sub
            msg = rest
    if first["type"] == "missing":
        msg = "missing (required)"
    elif first["type"] == "extra_forbidden":
        msg = "unknown key"
    return f"{key or '(top level)'}: {msg}"


def check_files(config: AgentConfig) -> None:
    """Check that the files the configuration names exist (at start, not when only parsing)."""
    named = {
        "broker.password_file": config.broker.password_file,
        "broker.tls.ca_file": config.broker.tls.ca_file,
        "broker.tls.cert_file": config.broker.tls.cert_file,
        "broker.tls.key_file": config.broker.tls.key_file,
        "identity.key_file": config.identity.key_file if config.identity else None,
        "identity.cert_file": config.identity.cert_file if config.identity else None,
        "identity.ca_file": config.identity.ca_file if config.identity else None,
    }
    for key, path in named.items():
        if path is not None and not path.is_file():
            raise ConfigError(f"{key}: no such file {str(path)!r}")
    if not config.broker.tls_enabled and any(
        getattr(config.broker.tls, k) for k in ("ca_file", "cert_file", "key_file")
    ):
        raise ConfigError("broker.tls: TLS files given but broker.url is not mqtts://")


def check_start(config: AgentConfig) -> None:
    """What ``frota agent run`` refuses before it starts: no device to read, loose secrets."""
    if not config.devices:
        raise ConfigError(
            "devices: none configured; the agent would record nothing "
            "(add [[devices]], firmware-notes/agent-config.md)"
        )
    check_secret_modes(config)


def check_secret_modes(config: AgentConfig) -> None:
    """Refuse secret files (the MQTT password, the client key) open to group or others.

    Checked when the agent starts: 0600 or 0400 owned by the agent's user pass, as do systemd's
    credentials (``LoadCredential=``: 0400 under ``$CREDENTIALS_DIRECTORY``).
    """
    secrets = {
        "broker.password_file": config.broker.password_file,
        "broker.tls.key_file": config.broker.tls.key_file,
    }
    for key, path in secrets.items():
        if path is None:
            continue
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError as err:
            raise ConfigError(f"{key}: cannot read {str(path)!r}: {err.strerror}") from err
        if mode & 0o077:
            raise ConfigError(
                f"{key}: {str(path)!r} is open to group or others (mode {mode:04o}); "
                "make it 0600 or 0400, owned by the agent's user"
            )


def parse_config(data: dict[str, Any]) -> AgentConfig:
    """Validate a parsed TOML document; raise ConfigError naming the first bad key."""
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_message(err, data)) from err


def load_config(path: str | Path) -> AgentConfig:
    """Read and validate an agent TOML file; raise ConfigError with a one-line reason."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text") from err
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from err
    config = parse_config(data)
    # Relative paths in the file are relative to the file, not to the working directory.
    base = path.resolve().parent

    def rel(value: Path | None) -> Path | None:
        return value if value is None or value.is_absolute() else base / value

    tls = config.broker.tls.model_copy(
        update={k: rel(getattr(config.broker.tls, k)) for k in ("ca_file", "cert_file", "key_file")}
    )
    broker = config.broker.model_copy(
        update={"password_file": rel(config.broker.password_file), "tls": tls}
    )
    buffer = config.buffer.model_copy(update={"path": rel(config.buffer.path)})
    ident = config.identity
    if ident is not None:
        ident = ident.model_copy(
            update={"key_file": rel(ident.key_file), "cert_file": rel(ident.cert_file),
                    "ca_file": rel(ident.ca_file)}
        )
    config = config.model_copy(update={"broker": broker, "buffer": buffer, "identity": ident})
    check_files(config)
    return config
