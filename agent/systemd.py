"""systemd integration for the agent: readiness, watchdog pings and status via ``sd_notify``.

Hand-rolled on purpose: the notify protocol is one datagram on the ``NOTIFY_SOCKET`` unix socket
(sd_notify(3)), and the Python bindings (python-systemd) need libsystemd headers to build on the
Pi. Without ``NOTIFY_SOCKET`` (not run by systemd, or in tests) every call is a no-op.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    """Sends ``READY=1``, ``WATCHDOG=1`` and ``STATUS=…`` to systemd, if systemd is listening."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):  # abstract namespace socket
            address = "\0" + address[1:]
        self._address = address or None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        watched = usec.isdigit() and (not pid or pid == str(os.getpid()))
        #: Seconds between watchdog pings (half of WatchdogSec=), or None without a watchdog.
        self.watchdog_interval: float | None = int(usec) / 2_000_000 if watched else None

    @property
    def enabled(self) -> bool:
        """True when systemd gave us a notify socket."""
        return self._address is not None

    def notify(self, message: str) -> bool:
        """Send one notify message; False when not under systemd or the socket is gone."""
        if self._address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(self._address)
                sock.sendall(message.encode())
        except OSError:
            return False
        return True

    def ready(self) -> bool:
        """Tell systemd the agent has started (Type=notify)."""
        return self.notify("READY=1")

    def watchdog(self) -> bool:
        """Ping the watchdog (WatchdogSec=); call it from the main loop only while it is healthy."""
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        """A one-line status shown by ``systemctl status``."""
        return self.notify("STATUS=" + text.replace("\n", " "))

    def stopping(self) -> bool:
        """Tell systemd the agent is shutting down."""
        return self.notify("STOPPING=1")
