"""``frota collector records``: stored records as JSON Lines, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from collector.store import open_store, record_row
from frota.cli import main
from tests.collector.helpers import T0, speed, write_config

V1 = "ABC1D23"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A database with V1's records stored out of order (seq 4 and 2 share a second)."""
    path = tmp_path / "collector.db"
    store = open_store(str(path))
    records = [
        speed(V1, "a1", 1, at_s=5),
        speed(V1, "a1", 4, at_s=2),
        speed(V1, "a1", 2, at_s=2),
        speed(V1, "a1", 3, at_s=0),
        speed("XYZ9K88", "b1", 1, at_s=1),
    ]
    store.put([record_row(r, T0) for r in records])
    store.close()
    return path


def _lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_records_print_as_json_lines_in_ts_seq_order(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["collector", "records", "--db", str(db), "--vehicle", V1,
                   "--since", "2026-03-02T14:10:00Z"])
    out = capsys.readouterr().out
    assert status == 0
    assert [r["seq"] for r in _lines(out)] == [3, 2, 4, 1]
    assert out.splitlines()[0] == json.dumps(speed(V1, "a1", 3, at_s=0), separators=(",", ":"))


def test_since_is_inclusive_and_until_exclusive(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collector", "records", "--db", str(db), "--vehicle", V1,
                 "--since", "2026-03-02T14:10:02.000Z", "--until", "2026-03-02T11:10:05-03:00"]) == 0
    assert [r["seq"] for r in _lines(capsys.readouterr().out)] == [2, 4]


def test_records_through_the_config_file(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "mqtt://127.0.0.1:1", 8080)
    assert main(["collector", "records", "--config", str(config), "--vehicle", "XYZ9K88",
                 "--since", "2026-03-02T00:00:00Z"]) == 0
    assert [r["agent"] for r in _lines(capsys.readouterr().out)] == ["b1"]


def test_an_unknown_vehicle_is_a_user_error_naming_the_known_ones(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["collector", "records", "--db", str(db), "--vehicle", "NOPE",
                 "--since", "2026-03-02T00:00:00Z"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("frota collector: error: no records stored for vehicle 'NOPE' "
                   "(vehicles with records: ABC1D23, XYZ9K88)\n")


def test_an_empty_range_says_so_on_stderr(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # V1's records are at 14:10:00-14:10:05 (helpers.T0): nothing in the hour before.
    assert main(["collector", "records", "--db", str(db), "--vehicle", V1,
                 "--since", "2026-03-02T13:00:00Z", "--until", "2026-03-02T14:00:00Z"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("frota collector records: no records for ABC1D23 since 2026-03-02T13:00:00Z "
                   "until 2026-03-02T14:00:00Z\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"],
         "frota collector: error: --since 'yesterday' is neither an RFC 3339 timestamp "
         "(e.g. 2026-03-02T14:10:00Z) nor a date (2026-03-02, local)\n"),
        (["--since", "2026-03-02T00:00:00Z", "--until", "2026-03-02 14:00"],
         "frota collector: error: --until '2026-03-02 14:00' is neither an RFC 3339 timestamp "
         "(e.g. 2026-03-02T14:10:00Z) nor a date (2026-03-02, local)\n"),
    ],
)
def test_a_bad_time_is_one_line_and_exit_1(db: Path, args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "frota", "collector", "records", "--db", str(db), "--vehicle", V1,
         *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (1, "", message)


def test_a_missing_database_is_an_error_and_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.db"
    assert main(["collector", "records", "--db", str(missing), "--vehicle", V1,
                 "--since", "2026-03-02T00:00:00Z"]) == 1
    assert capsys.readouterr().err == f"frota collector: error: no database at {missing}\n"
    assert not missing.exists()


def test_dates_are_days_in_the_vehicles_local_time(db: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # the records are at 14:10–14:10:05Z on 2026-03-02 = 11:10 in São Paulo (the default
    # profile's zone with --db): within the local day 2026-03-02 (03:00Z → 03:00Z next day)
    assert main(["collector", "records", "--db", str(db), "--vehicle", V1,
                 "--since", "2026-03-02", "--until", "2026-03-03"]) == 0
    assert [r["seq"] for r in _lines(capsys.readouterr().out)] == [3, 2, 4, 1]
