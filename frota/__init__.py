"""Frota: open-source telemetry for intercity buses in Brazil (the ``frota`` command)."""

__version__ = "0.1.0"
