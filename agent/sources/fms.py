"""The FMS CAN bus (firmware-notes/fms.md): the tachograph's and the doors' frames, read with
python-can, listen-only.

``interface = "slcan"`` (the default) opens a serial CAN adapter on ``port`` in listen-only mode
(SLCAN ``L``: the adapter neither transmits nor acknowledges; Frota never sends on the vehicle
bus); ``"socketcan"`` reads the Linux interface named by ``port`` (``can0``), which
systemd-networkd brings up listen-only (firmware-notes/systemd/80-can0.network), so the agent
needs no CAP_NET_ADMIN.

Health, as for the serial sources: an adapter that goes away is ``disconnected``, a bus that
carries no frame for ``silent_after_s`` is ``silent`` (python-can's slcan reports no bus-off), and
a line that is not an SLCAN frame (python-can raises on one) is counted as garbage
(``decoder.stats.malformed``) and skipped. Door records of doors an RS-485 counter reports
(``SourceContext.counted_doors``) are left out: one source per door.

CAN is broadcast and the tachograph keeps no history for the FMS interface: frames sent while the
agent is not reading (stopped, killed, the adapter out) are gone. Each such gap is a ``device``
record: ``disconnected`` or ``silent`` when it starts while the agent runs; for the time the agent
itself was down, a ``disconnected`` record stamped at the last record committed before it,
written when the bus is read again (that time is committed with every batch, :meth:`state_for`).
"""

from __future__ import annotations

import json
import logging
import termios
import time

import can
import serial
from can.interfaces.slcan import slcanBus

from agent.config import DeviceConfig
from agent.sources.base import READ_TIMEOUT_S, Source, SourceClosed, SourceContext, agent_record
from agent.sources.slcan_bulk import BulkSlcanBus
from protocols.fms import CanFrame, FmsDecoder, slcan
from protocols.records import Record, make_record

log = logging.getLogger(__name__)

#: The FMS-Standard bus rate (ISO 11898, 250 kbit/s).
FMS_BITRATE = 250_000
#: python-can's slcan waits this long after opening the port by default (adapters that reset).
DEFAULT_OPEN_WAIT_S = 2.0
#: The serial read timeout python-can's slcan polls with: a byte ends the wait at once, so this
#: bounds only how often an idle line wakes the thread (python-can's default, 1 ms, is 1000/s).
SLCAN_POLL_S = 0.05
#: Bytes waiting in an SLCAN port past which the source is reading a backlog (about ten frames):
#: the records' device times are then behind "now" and do not set the agent's time (with a
#: GPS read promptly beside it, a lagging tachograph would pull the door records' times back).
BEHIND_BYTES = 300
#: How often the decoder is given the agent's time estimate (used only while TD is absent).
ESTIMATE_EVERY_S = 0.1


class CanLine:
    """An open python-can bus as the source's line (``close`` never raises)."""

    def __init__(self, bus: can.BusABC) -> None:
        self.bus = bus

    def close(self) -> None:
        """Shut the bus down (an SLCAN adapter already gone cannot be told to close)."""
        try:
            self.bus.shutdown()
        except (can.CanError, serial.SerialException, OSError) as err:
            log.debug("closing the CAN bus: %s", err)


def _waiting(bus: can.BusABC) -> int:
    """Bytes an SLCAN adapter's port holds, not read yet (0 for SocketCAN: not known)."""
    if isinstance(bus, slcanBus):
        try:
            return int(bus.serialPortOrig.in_waiting)
        except (serial.SerialException, OSError, termios.error):
            return 0
    return 0


def _line_gone(err: can.CanError) -> bool:
    """True when python-can's error is the adapter going away (not a garbage line)."""
    return isinstance(err.__cause__, serial.SerialException | OSError | termios.error)


class FmsSource(Source):
    """Reads CAN frames, listen-only, and feeds them to the FMS decoder."""

    def __init__(self, config: DeviceConfig, context: SourceContext) -> None:
        super().__init__(config, context)
        self.fms = FmsDecoder(context.vehicle)
        self.decoder = self.fms
        self.garbage = 0
        self.sessions = 0
        self._gap_checked = False

    def open(self) -> CanLine:
        """Open the bus listen-only (python-can); a failure is a disconnected device."""
        cfg = self.config
        try:
            if (cfg.interface or "slcan") == "socketcan":
                bus = can.Bus(interface="socketcan", channel=cfg.port, receive_own_messages=False)
            else:
                # python-can's slcanBus, reading the port in bulk (its own reads one byte per
                # call, 3.1× the registrador's CPU): agent/sources/slcan_bulk.py.
                bus = BulkSlcanBus(
                    channel=cfg.port, tty_baudrate=cfg.baudrate,
                    bitrate=cfg.bitrate or FMS_BITRATE, listen_only=True, timeout=SLCAN_POLL_S,
                    sleep_after_open=DEFAULT_OPEN_WAIT_S if cfg.open_wait_s is None
                    else cfg.open_wait_s,
                )
        except (can.CanError, ImportError) as err:
            raise SourceClosed(f"cannot open the CAN bus: {err}") from err
        line = CanLine(bus)
        try:
            # Lines left in the port from before it was opened were sent while nobody read them:
            # gone, like every frame the agent was not there for (not read late, misdated).
            if isinstance(bus, slcanBus):
                bus.flush()
        except (can.CanError, serial.SerialException, OSError) as err:
            line.close()
            raise SourceClosed(f"cannot open the CAN bus: {err}") from err
        return line

    def session(self, port: CanLine) -> None:
        """Read frames until the bus falls silent (return), the adapter goes (raise) or stop."""
        bus = port.bus
        if self.sessions:
            # A gap in reading (adapter out, bus silent): the tachograph time carried forward
            # over it is not the tachograph's. Frames wait for the next TD, as at the start.
            self.fms.forget_time()
        self.sessions += 1
        self.last_data_mono = None
        opened = time.monotonic()
        estimated = 0.0
        tee_base: tuple[float, int] | None = None  # (receive time, its ms) for the capture
        while not self.stop.is_set():
            try:
                msg = bus.recv(READ_TIMEOUT_S)
            except can.CanError as err:
                if _line_gone(err):
                    raise SourceClosed(str(err)) from err
                # A line that is not text, or too long: BulkSlcanBus has already dropped it
                # alone (python-can's own _read kept it in its buffer, to join later lines).
                self._garbage(err)
                msg = None
            except (ValueError, IndexError) as err:  # python-can's slcan parsing a garbage line
                self._garbage(err)
                msg = None
            now = time.monotonic()
            if msg is None or msg.is_error_frame or msg.is_remote_frame:
                since = self.last_data_mono if self.last_data_mono is not None else opened
                if now - since >= self.config.silent_after_s:
                    return
                continue
            self.data_arrived()
            if now - estimated >= ESTIMATE_EVERY_S:
                self.fms.set_time(self.clock.now_ms()[0])
                estimated = now
            # The receive time on the monotonic clock: the decoder uses only differences, and
            # python-can's slcan stamps frames with the host's wall clock, which may step.
            frame = CanFrame(now, msg.arbitration_id, msg.is_extended_id, bytes(msg.data))
            if self.taps:  # frota agent capture: the frame as SLCAN text, as frota decode reads it
                # Stamped on the receive clock from one anchor per session, so the capture's
                # time between frames is the agent's (decoded, its frames date as the agent's).
                if tee_base is None:
                    tee_base = (now, self.clock.now_ms()[0])
                self.tee(slcan.encode_frame(frame), tee_base[1] + round((now - tee_base[0]) * 1000))
            records = self._ours(self.fms.frame(frame))
            if records:
                self.live = _waiting(bus) < BEHIND_BYTES
            self.deliver(records)
        self.deliver(self._ours(self.fms.finish()))

    def _ours(self, records: list[Record]) -> list[Record]:
        """Leave out the door records of doors an RS-485 counter reports (never two sources)."""
        counted = self.context.counted_doors
        if not counted or not records:
            return records
        return [r for r in records if r["kind"] != "door" or r["door"] not in counted]

    def _garbage(self, err: Exception) -> None:
        self.garbage += 1
        self.fms.stats.malformed += 1
        self.fms.stats.reject(f"not an SLCAN frame: {err}", b"")
        log.debug("%s: garbage on the line: %s", self.name, err)

    def data_arrived(self) -> None:
        """The bus spoke: after a restart, first record the time the agent was not reading."""
        if not self._gap_checked:
            self._gap_checked = True
            self._agent_gap()
        super().data_arrived()

    def _agent_gap(self) -> None:
        if self.state is None:
            return
        try:
            saved = json.loads(self.state.load() or "{}")
        except ValueError:
            return
        last = saved.get("last_ts") if isinstance(saved, dict) else None
        if not isinstance(last, str):
            return
        detail = (f"not read since {last}: the agent was not running; CAN frames sent on the bus "
                  "meanwhile are gone (broadcast, no history)")
        log.warning("%s: %s", self.name, detail)
        gap = make_record("device", self.vehicle, last, device=self.config.device,
                          status="disconnected", detail=detail)
        ok = agent_record(self.vehicle, self.clock, self.config.device, "ok",
                          f"{self.config.port}: reading the bus again")
        self.sink("agent", [gap, ok])
        self.health = "ok"

    def state_for(self, records: list[Record]) -> str | None:
        """The time of the last record, committed with it: where a gap starts after a restart."""
        if not records or self.state is None:
            return None
        return json.dumps({"last_ts": max(r["ts"] for r in records)})
