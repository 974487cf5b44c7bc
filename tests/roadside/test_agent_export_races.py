"""``frota agent export`` streams the bundle as the buffer is read (8a7739e) while the agent keeps
writing: records committed during the export (and the WAL checkpointed) leave the bundle as it
was when its read began — intact, every record up to there, none half-seen."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import export as agent_export
from agent.buffer import Buffer
from agent.config import load_config
from frota.provision import fleet as provisioning
from protocols import identity
from protocols.bundle import Chains
from protocols.bundle_check import check_bundle
from tests.services import free_port
from tests.trust.broker import broker_user
from tests.trust.fleet import speed

BUS = "ABC1D23"


@pytest.fixture
def bus(tmp_path: Path) -> tuple[Path, Path]:
    made = provisioning.init(tmp_path / "fleet", hosts=["127.0.0.1"], port=free_port(),
                             bind="127.0.0.1", broker_user=broker_user(), persistence=False)
    return (provisioning.add_vehicle(made, BUS, str(tmp_path / "buffer.sqlite")),
            made.ca_cert_path)


def test_records_written_during_an_export_leave_it_intact(
        bus: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    config_path, ca = bus
    config = load_config(config_path)
    buf = Buffer(config.buffer.path)
    try:
        buf.add([("registrador", speed(BUS, n)) for n in range(0, 3000, 10)])  # seq 1..300
        lines = agent_export._lines
        written: list[int] = []

        def lines_while_writing(reader: object, first: int | None, summed: Chains,
                                counted: list[int]) -> Iterator[bytes]:
            for n, line in enumerate(lines(reader, first, summed, counted)):  # type: ignore[arg-type]
                if n in (1, 150):  # the agent commits, and checkpoints its WAL, meanwhile
                    written.extend(buf.add([("registrador", speed(BUS, 3000 + 10 * k + n))
                                            for k in range(50)]))
                    buf.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                yield line

        monkeypatch.setattr(agent_export, "_lines", lines_while_writing)
        data, made = agent_export.bundle_bytes(config, 2)
    finally:
        buf.close()
    assert len(written) == 100
    report = check_bundle(data, identity.load_cert_file(ca))
    assert report.intact, report.problems[:5]
    assert (made.records, made.first_seq, made.last_seq) == (300, 1, 300)


def test_an_empty_buffer_exports_an_intact_empty_bundle(bus: tuple[Path, Path]) -> None:
    config_path, ca = bus
    config = load_config(config_path)
    Buffer(config.buffer.path).close()
    data, made = agent_export.bundle_bytes(config, 1)
    report = check_bundle(data, identity.load_cert_file(ca))
    assert report.intact, report.problems
    assert (report.records, made.records, made.first_seq) == (0, 0, None)
