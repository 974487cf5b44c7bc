"""The scenario player of the demo, in a thread, paced against the demo's main thread.

It waits (lines open) until the agent listens, and holds the lines open after the scenario's last
second until the demo has drained the agent and stopped it (see ``frota/commands/demo.py``).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocols.records import Record


@dataclass
class Player:
    """The scenario player's thread and the events that pace it against the demo."""

    sc: Any
    last_second: int
    time_scale: float
    links: Path
    #: Where the tachograph is read: its serial line (registrador) or the FMS CAN bus (fms).
    tachograph: str = "registrador"
    #: Gets each trip or incident the FMS bus does not carry, at its second (the operator).
    on_operator: Callable[[Record], None] | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)
    played: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    second: int = 0
    #: Door-counter polls answered since the last second was played (None: not played yet).
    polls_after_end: int | None = None
    error: Exception | None = None
    thread: threading.Thread | None = None
    _polls_at_end: int | None = None

    def start(self) -> None:
        """Start playing in a thread (it waits for ``go`` once the lines are open)."""
        self.thread = threading.Thread(target=self._run, name="scenario", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        """True while the player thread runs."""
        return self.thread is not None and self.thread.is_alive()

    def _run(self) -> None:
        from simulators.scenario.play import play

        try:
            play(self.sc, time_scale=self.time_scale, links=self.links,
                 announce=io.StringIO(), lead_in_s=0.5, tail_s=0.2, on_ready=self._on_ready,
                 on_second=self._on_second, should_stop=self.stop.is_set,
                 tachograph=self.tachograph, on_operator=self.on_operator, hold=self._hold)
        except Exception as err:  # noqa: BLE001 - handed to the main thread, which reports it
            self.error = err
        finally:
            self.ready.set()
            self.played.set()

    def _on_ready(self, paths: dict[str, str]) -> None:
        self.ready.set()
        while not (self.go.is_set() or self.stop.is_set()):
            self.go.wait(0.1)

    def _on_second(self, t: int) -> None:
        self.second = t

    def _hold(self, polls: int) -> bool:
        """After the last second: keep the lines open (door polls answered) until released."""
        if self._polls_at_end is None:
            self._polls_at_end = polls
        self.polls_after_end = polls - self._polls_at_end
        self.played.set()
        return not (self.release.is_set() or self.stop.is_set())

    def join(self) -> None:
        """End the play (if still running) and wait for the thread."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
