"""``frota collector findings --driver ID``: a driver's findings, by registry id or (with the
configuration's registry) by card number. sp-breakdown's driver D-2001 (card 03398765432) has the
interruption and the assistance due; D-1001 drove sp-clean, which has none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from frota.cli import main


def _drivers(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["collector", "findings", *args]) == 0
    out = capsys.readouterr().out
    return sorted(json.loads(line)["rule"] for line in out.splitlines())


def test_findings_of_a_driver(tmp_path: Path, scenario_store: tuple[Path, Path],
                              capsys: pytest.CaptureFixture[str]) -> None:
    db, registry = scenario_store
    shutil.copy(db, tmp_path / "collector.db")
    shutil.copy(registry, tmp_path / "fleet.json")
    config = tmp_path / "collector.toml"
    config.write_text('registry = "fleet.json"\n[database]\npath = "collector.db"\n')
    both = ["trip.assistance_due", "trip.interruption"]
    assert _drivers(capsys, "--db", str(db), "--driver", "D-2001") == both
    assert _drivers(capsys, "--db", str(db), "--driver", "D-1001") == []
    assert _drivers(capsys, "--config", str(config), "--driver", "03398765432") == both
    assert _drivers(capsys, "--db", str(db), "--driver", "D-2001", "--vehicle", "FRT1A01") == []
    # a card number read without the registry, and a driver the registry does not know: nothing
    # found, and said why (not a silent empty list)
    assert main(["collector", "findings", "--db", str(db), "--driver", "03398765432"]) == 0
    said = capsys.readouterr()
    assert (said.out, "give --config" in said.err) == ("", True)
    assert main(["collector", "findings", "--config", str(config), "--driver", "D-9999"]) == 0
    assert "neither as an id nor as a card number" in capsys.readouterr().err
