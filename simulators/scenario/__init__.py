"""Whole-trip scenarios: a TOML file → a timeline → canonical records, or a play on every device."""

from __future__ import annotations

from pathlib import Path

from simulators.scenario.load import load
from simulators.scenario.model import Scenario, ScenarioError

#: The folder of the shipped scenarios (installed with the package).
DATA_DIR = Path(__file__).parent / "data"


def shipped() -> list[Path]:
    """The shipped scenario files, by name."""
    return sorted(DATA_DIR.glob("*.toml"))


def find(name_or_path: str) -> Path:
    """A scenario file by path, or by the name of a shipped one (``sp-clean``)."""
    path = Path(name_or_path)
    if path.exists() or path.suffix == ".toml" or "/" in name_or_path:
        return path
    return DATA_DIR / f"{name_or_path}.toml"


__all__ = ["DATA_DIR", "Scenario", "ScenarioError", "find", "load", "shipped"]
