"""One process harness for the demo, the tests and the benchmarks: the broker, the collector, the
agent and the simulators as real processes (:mod:`frota.harness.process`,
:mod:`frota.harness.services`).

It raises plain errors (:class:`HarnessError`, ``TimeoutError``); ``frota demo`` turns them into
its one-line message, a test lets them fail the test.
"""

from frota.harness.process import (
    PROJECT,
    Child,
    HarnessError,
    free_port,
    frota_argv,
    held_files,
    stop_process,
    wait_port,
)
from frota.harness.services import (
    AgentProcess,
    CollectorProcess,
    Mosquitto,
    SimulatorProcess,
    health,
    mosquitto_binary,
    write_collector_files,
)

__all__ = [
    "PROJECT",
    "AgentProcess",
    "Child",
    "CollectorProcess",
    "HarnessError",
    "Mosquitto",
    "SimulatorProcess",
    "free_port",
    "frota_argv",
    "health",
    "held_files",
    "mosquitto_binary",
    "stop_process",
    "wait_port",
    "write_collector_files",
]
