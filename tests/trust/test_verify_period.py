"""``frota verify --since/--until`` (docs/trust.md): the chains are always checked whole; the
period limits the problems shown (a problem at a record's time; a stretch — a gap — when it
overlaps the period), and the exit status follows what is shown."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from collector.ingest import Ingest
from collector.store import open_store
from frota.cli import main
from protocols import identity
from protocols.chain import GENESIS, record_hash, sign_checkpoint
from protocols.keyring import entry_json, write_entries
from protocols.uplink import encode_batch
from tests.trust.fleet import A, speed

# speed(A, n) is at 2026-03-02T14:00:00Z + n seconds (tests/agent/helpers.py T0_MS)


@pytest.fixture
def tampered(tmp_path: Path) -> tuple[Path, Path]:
    """Ten chained, signed records of A (14:00:01..14:00:10), then seq 3 edited in the file and
    seq 7 deleted with its link (a gap between 14:00:06 and 14:00:08)."""
    ca_key, ca_cert = identity.make_ca("test CA")
    key = identity.new_signing_key()
    cert = identity.certify_signing_key(ca_key, ca_cert, A, "vehicle", key.public_key())
    (tmp_path / "ca.crt").write_bytes(identity.cert_pem(ca_cert))
    write_entries(tmp_path / "keyring.json", [entry_json(cert)])
    recs: list[dict[str, object]] = []
    prev = GENESIS
    for seq in range(1, 11):
        rec = {**speed(A, seq, 60.0 + seq), "agent": "a1", "seq": seq, "prev": prev}
        prev = record_hash(rec)
        recs.append(rec)
    db = tmp_path / "c.db"
    store = open_store(str(db))
    try:
        cp = sign_checkpoint(key, A, "a1", 10, prev).json()
        answer = Ingest(store, lambda: frozenset({A})).handle(
            f"frota/v1/{A}/up", encode_batch(A, "a1", recs, checkpoint=cp))
        assert answer is not None
        assert answer[1].stored == [(1, 10)]
    finally:
        store.close()
    conn = sqlite3.connect(db)
    try:
        conn.execute("DROP TRIGGER IF EXISTS records_delete_guard")
        conn.execute("UPDATE records SET record = replace(record, '63', '163') WHERE seq = 3")
        conn.execute("DELETE FROM records WHERE seq = 7")
        conn.execute("DELETE FROM links WHERE seq = 7")
        conn.commit()
    finally:
        conn.close()
    return db, tmp_path / "ca.crt"


def _verify(paths: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
            *period: str) -> tuple[int, str]:
    db, ca = paths
    code = main(["verify", "--db", str(db), "--ca", str(ca), *period])
    out = capsys.readouterr()
    return code, out.out + out.err


ALTERED = f"{A} agent a1 seq 3: altered"
#: seq 4's prev is the hash of seq 3 as received, no longer of seq 3 as stored
BREAK = f"{A} agent a1 seq 4: chain_break"
GAP = f"{A} agent a1 seq 7: missing: seq 7 not in the store"
#: the deleted record was registrador frame 7: a gap in the frame numbers too, the same stretch
FRAME_GAP = f"{A} agent registrador frame: missing: registrador frame 7 not in the store"


def test_without_a_period_every_problem_is_shown(tampered: tuple[Path, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _verify(tampered, capsys)
    assert code == 3
    assert f"{ALTERED}: stored record differs from the one received (2026-03-02T14:00:03.000Z)" \
        in out
    assert f"{GAP} (between 2026-03-02T14:00:06.000Z and 2026-03-02T14:00:08.000Z)" in out
    assert f"{BREAK}: prev is not the hash of the record before it (2026-03-02T14:00:04.000Z)" \
        in out
    assert f"{FRAME_GAP} (between 2026-03-02T14:00:06.000Z and 2026-03-02T14:00:08.000Z)" in out
    assert "NOT INTACT: 4 problem(s)" in out


@pytest.mark.parametrize(("period", "altered", "broken", "gap"), [
    # since is inclusive, until exclusive, on the record's time (altered 14:00:03, break 14:00:04)
    (("--since", "2026-03-02T14:00:03Z"), True, True, True),
    (("--since", "2026-03-02T14:00:03.001Z"), False, True, True),
    (("--until", "2026-03-02T14:00:03.001Z"), True, False, False),
    (("--until", "2026-03-02T14:00:03Z"), False, False, False),
    (("--since", "2026-03-02T14:00:03Z", "--until", "2026-03-02T14:00:04Z"), True, False, False),
    # the gap lies between 14:00:06 and 14:00:08: shown when the period overlaps that
    (("--since", "2026-03-02T14:00:08Z"), False, False, True),
    (("--since", "2026-03-02T14:00:08.001Z"), False, False, False),
    (("--until", "2026-03-02T14:00:06.001Z"), True, True, True),
    (("--until", "2026-03-02T14:00:06Z"), True, True, False),
    # a time zone offset is the same instant (11:00:07 at UTC-3 is 14:00:07Z)
    (("--since", "2026-03-02T11:00:07-03:00", "--until", "2026-03-02T11:00:07.5-03:00"),
     False, False, True),
])
def test_the_period_limits_what_is_shown(tampered: tuple[Path, Path],
                                         capsys: pytest.CaptureFixture[str],
                                         period: tuple[str, ...], altered: bool, broken: bool,
                                         gap: bool) -> None:
    code, out = _verify(tampered, capsys, *period)
    assert (ALTERED in out, BREAK in out, GAP in out, FRAME_GAP in out) == (
        altered, broken, gap, gap)
    shown = int(altered) + int(broken) + 2 * int(gap)
    assert f"{4 - shown} problem(s) outside it not shown" in out
    if shown:
        assert code == 3
        assert f"NOT INTACT: {shown} problem(s)" in out
    else:
        assert code == 0
        assert "intact in that period" in out
        assert "every record in it verifies" in out


def test_a_bad_period_is_a_one_line_error(tampered: tuple[Path, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _verify(tampered, capsys, "--since", "yesterday")
    assert code == 1
    assert "--since 'yesterday' is not an RFC 3339 timestamp" in out
    assert "Traceback" not in out
