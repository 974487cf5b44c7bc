"""The one MQTT client of the agent and the collector: paho-mqtt set up from :class:`MqttSettings`.

Both sides connect the same way (``firmware-notes/mqtt.md``): MQTT 3.1.1, a fixed client id and
a persistent session (MQTT 5 for a collector in a shared-subscription group, ``docs/deployment.md``), TLS for ``mqtts://`` with the broker's certificate checked, credentials,
an optional last will, paho's reconnect backoff (1 s doubling to 30 s). What paho reports in
several shapes — ``ssl.SSLError``/``OSError``/``ValueError`` from ``tls_set`` and ``connect``, error
codes from ``publish`` — leaves this module as ONE exception, :class:`MqttError` (aiomqtt's model:
paho's errors are turned into one error at the boundary). A failed connection attempt and a lost
connection are described in words ("connection refused", "connection closed by the broker")
instead of paho's "Unspecified error", for the logs and the collector's ``/health``.

Hand-rolled on purpose: paho swallows the ``OSError`` of a failed reconnect (``on_connect_fail``
gets no argument) and reports every lost socket as "Unspecified error"; :class:`MqttClient` keeps
the reason (from ``reconnect`` and paho's own error log lines) so the callers can say it.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

#: paho's reconnect backoff: the first retry after this many seconds, doubling up to the maximum.
RECONNECT_MIN_S: Final = 1
RECONNECT_MAX_S: Final = 30

#: MQTT 5 session expiry of a persistent session (the session of MQTT 3.1.1 never expires; the
#: broker's ``persistent_client_expiration`` may still end it): one week.
SESSION_EXPIRY_S: Final = 7 * 24 * 3600

#: paho's error log lines that say why a connection was lost (their text follows the prefix).
_SOCKET_LOG_PREFIXES: Final = ("failed to receive on socket: ", "timeout on socket: ")


class MqttError(RuntimeError):
    """The MQTT client cannot be set up (TLS files, URL) or refused a publish; the message says why."""


@dataclass(frozen=True)
class TlsFiles:
    """TLS for ``mqtts://``: the CA to trust and, for client certificates, the cert and key."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    #: Skip the host name check (a broker whose certificate names another host); never in production.
    insecure: bool = False


@dataclass(frozen=True)
class Will:
    """The last will the broker publishes when the client vanishes without saying goodbye."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = True


@dataclass(frozen=True)
class MqttSettings:
    """Everything needed to connect: where, as whom, how."""

    url: str  # mqtt://host[:port] or mqtts://host[:port]
    client_id: str
    username: str | None = None
    password: str | None = None
    tls: TlsFiles = field(default_factory=TlsFiles)
    will: Will | None = None
    keepalive_s: int = 30
    #: False: a persistent session (QoS 1 messages wait at the broker while the client is away).
    clean_session: bool = False
    #: True: the caller PUBACKs each message itself (:meth:`MqttClient.ack`) after its commit.
    manual_ack: bool = False
    #: QoS 1 messages sent and not yet PUBACKed by the broker.
    max_inflight: int = 20
    #: Messages queued while disconnected or beyond ``max_inflight`` (0: no limit).
    max_queued: int = 0
    #: Speak MQTT 5 instead of 3.1.1 (shared subscriptions, ``$share/GROUP/...``, are MQTT 5's).
    #: ``clean_session`` then maps to clean start with a session expiry of 0 (True) or of
    #: :data:`SESSION_EXPIRY_S` (False).
    mqtt5: bool = False

    @property
    def host(self) -> str:
        """The broker's host name."""
        return urlsplit(self.url).hostname or ""

    @property
    def uses_tls(self) -> bool:
        """True for ``mqtts://``."""
        return urlsplit(self.url).scheme == "mqtts"

    @property
    def port(self) -> int:
        """The broker's port (1883 for mqtt://, 8883 for mqtts:// unless given)."""
        return urlsplit(self.url).port or (8883 if self.uses_tls else 1883)


def describe_os_error(err: BaseException) -> str:
    """A connection error in a few words: "connection refused", "TLS: certificate verify failed"."""
    if isinstance(err, ssl.SSLCertVerificationError):
        return f"TLS: {err.verify_message or err.reason or err}"
    if isinstance(err, ssl.SSLError):
        return f"TLS: {err.reason or err}"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, ConnectionResetError):
        return "connection reset by peer"
    if isinstance(err, socket.gaierror):
        return f"unknown host ({err.strerror})"
    if isinstance(err, TimeoutError):
        return "timed out"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror[0].lower() + err.strerror[1:]
    return str(err) or type(err).__name__


OnConnect = Callable[[bool], None]  # session_present
OnConnectError = Callable[[str, float], None]  # reason, seconds until the next attempt
OnDisconnect = Callable[[str], None]  # reason
OnMessage = Callable[[mqtt.MQTTMessage], None]


class MqttClient(mqtt.Client):
    """paho's client, set up from :class:`MqttSettings`, that says in words why it is not connected.

    The callbacks are Frota's, not paho's: ``on_connected(session_present)`` when the broker
    accepted the connection; ``on_connect_error(reason, retry_in_s)`` for every attempt that failed
    (refused, unreachable, TLS, refused by the broker); ``on_lost(reason)`` when an established
    connection ended other than by :meth:`stop`; ``on_received(message)`` for every message. They
    run on paho's thread. paho's own methods (``subscribe``, ``ack``, ``publish``) stay available.
    """

    def __init__(
        self,
        settings: MqttSettings,
        *,
        on_connected: OnConnect | None = None,
        on_connect_error: OnConnectError | None = None,
        on_lost: OnDisconnect | None = None,
        on_received: OnMessage | None = None,
    ) -> None:
        if settings.mqtt5:  # MQTT 5 has no clean session flag: clean start is given at connect
            super().__init__(
                CallbackAPIVersion.VERSION2,
                client_id=settings.client_id,
                protocol=MQTTProtocolVersion.MQTTv5,
                manual_ack=settings.manual_ack,
            )
        else:
            super().__init__(
                CallbackAPIVersion.VERSION2,
                client_id=settings.client_id,
                clean_session=settings.clean_session,
                protocol=MQTTProtocolVersion.MQTTv311,
                manual_ack=settings.manual_ack,
            )
        self.settings = settings
        #: Why the client is not connected (None while connected or before the first attempt).
        self.last_error: str | None = None
        self.on_connected = on_connected
        self.on_connect_error = on_connect_error
        self.on_lost = on_lost
        self.on_received = on_received
        self._failures = 0
        self._was_connected = False
        self._stopping = False
        self.on_log = self._note_log
        self.on_connect_fail = self._tcp_failed
        self.on_connect = self._connack
        self.on_disconnect = self._disconnected
        self.on_message = self._message
        if settings.username is not None:
            self.username_pw_set(settings.username, settings.password)
        if settings.uses_tls:
            tls = settings.tls
            try:
                self.tls_set(
                    ca_certs=str(tls.ca_file) if tls.ca_file else None,
                    certfile=str(tls.cert_file) if tls.cert_file else None,
                    keyfile=str(tls.key_file) if tls.key_file else None,
                    cert_reqs=ssl.CERT_REQUIRED,
                )
            except (ssl.SSLError, OSError, ValueError) as err:
                raise MqttError(f"broker.tls: cannot load the TLS files: {err}") from err
            self.tls_insecure_set(tls.insecure)
        if settings.will is not None:
            will = settings.will
            try:
                self.will_set(will.topic, will.payload, qos=will.qos, retain=will.retain)
            except ValueError as err:
                raise MqttError(f"bad last will: {err}") from err
        self.reconnect_delay_set(min_delay=RECONNECT_MIN_S, max_delay=RECONNECT_MAX_S)
        self.max_inflight_messages_set(settings.max_inflight)
        self.max_queued_messages_set(settings.max_queued)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Connect in the background (paho's thread retries with backoff until it succeeds)."""
        settings = self.settings
        try:
            if settings.mqtt5:
                props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
                props.SessionExpiryInterval = 0 if settings.clean_session else SESSION_EXPIRY_S
                self.connect_async(settings.host, settings.port, keepalive=settings.keepalive_s,
                                   clean_start=settings.clean_session, properties=props)
            else:
                self.connect_async(settings.host, settings.port, keepalive=settings.keepalive_s)
        except ValueError as err:
            raise MqttError(f"cannot connect to {settings.url}: {err}") from err
        self.loop_start()

    def stop(self) -> None:
        """Disconnect and stop paho's thread (``on_lost`` is not called)."""
        self._stopping = True
        self.disconnect()
        self.loop_stop()

    # -- publishing ------------------------------------------------------------------------
    def send(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> mqtt.MQTTMessageInfo:
        """Publish; MqttError when paho refuses the message (too large, queue full, bad topic).

        A QoS 1 message published while disconnected is kept and sent after the reconnect:
        that is not an error (``info.rc`` is ``MQTT_ERR_NO_CONN``).
        """
        try:
            info = self.publish(topic, payload, qos=qos, retain=retain)
        except ValueError as err:
            raise MqttError(f"cannot publish to {topic}: {err}") from err
        kept = info.rc == MQTTErrorCode.MQTT_ERR_SUCCESS or (
            info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN and qos > 0
        )
        if not kept:
            raise MqttError(f"cannot publish to {topic}: {mqtt.error_string(info.rc)}")
        return info

    # -- paho's callbacks, turned into Frota's ---------------------------------------------
    def reconnect(self) -> MQTTErrorCode:
        """paho's reconnect, remembering why it failed (paho drops the exception)."""
        try:
            return super().reconnect()
        except OSError as err:
            self.last_error = describe_os_error(err)
            raise

    def next_retry_s(self) -> float:
        """Seconds until paho's next attempt: ``RECONNECT_MIN_S`` after the first failure,
        doubling at each one until the broker accepts a connection (paho's backoff)."""
        return float(min(RECONNECT_MIN_S * 2 ** max(self._failures - 1, 0), RECONNECT_MAX_S))

    def _failed(self, reason: str) -> None:
        self._failures += 1
        self.last_error = reason
        if self.on_connect_error is not None:
            self.on_connect_error(reason, self.next_retry_s())

    def _tcp_failed(self, _client: Any, _userdata: Any) -> None:
        self._failed(self.last_error or "connection failed")

    def _connack(
        self, _client: Any, _userdata: Any, flags: mqtt.ConnectFlags, reason: ReasonCode, _props: Any
    ) -> None:
        if reason.is_failure:
            self._failed(f"refused by the broker: {reason}")
            return
        self._failures = 0
        self.last_error = None
        self._was_connected = True
        if self.on_connected is not None:
            self.on_connected(flags.session_present)

    def _disconnected(
        self,
        _client: Any,
        _userdata: Any,
        flags: mqtt.DisconnectFlags,
        reason: ReasonCode,
        _props: Any,
    ) -> None:
        if not self._was_connected:
            return  # a refused CONNACK: already told by _connack
        self._was_connected = False
        name = reason.getName()
        if flags.is_disconnect_packet_from_server:
            text = f"the broker ended the session: {reason}"
        elif name == "Keep alive timeout":
            text = f"no answer from the broker within the keepalive ({self.settings.keepalive_s} s)"
        elif name == "Unspecified error":
            text = self.last_error or "connection closed by the broker"
        else:
            text = str(reason)
        self.last_error = text
        self._failures = 1  # paho waits RECONNECT_MIN_S before its first retry
        if self.on_lost is not None and not self._stopping:
            self.on_lost(text)

    def _message(self, _client: Any, _userdata: Any, message: mqtt.MQTTMessage) -> None:
        if self.on_received is not None:
            self.on_received(message)

    def _note_log(self, _client: Any, _userdata: Any, level: int, text: str) -> None:
        if level != mqtt.MQTT_LOG_ERR:
            return
        for prefix in _SOCKET_LOG_PREFIXES:
            if text.startswith(prefix):
                detail = text[len(prefix):]
                self.last_error = "connection reset by peer" if "reset by peer" in detail else detail


def make_client(
    settings: MqttSettings,
    *,
    on_connected: OnConnect | None = None,
    on_connect_error: OnConnectError | None = None,
    on_lost: OnDisconnect | None = None,
    on_received: OnMessage | None = None,
) -> MqttClient:
    """The MQTT client for ``settings``; MqttError when it cannot be set up (TLS files, will)."""
    return MqttClient(
        settings,
        on_connected=on_connected,
        on_connect_error=on_connect_error,
        on_lost=on_lost,
        on_received=on_received,
    )
