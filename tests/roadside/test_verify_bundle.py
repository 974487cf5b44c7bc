"""frota verify BUNDLE on the collector's bundle (GET /vehicles/{v}/bundle over a real uvicorn
socket): a fresh one is intact (exit 0); one with a record removed, changed or added is not
(exit 3) and says where — the line, the agent and the seq; one re-signed by a key the fleet CA
did not certify is refused; the summary in Brazilian Portuguese with --lang pt-BR."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from cryptography import x509

from frota.cli import main
from protocols import identity
from protocols.bundle_check import check_bundle
from protocols.canonical import canonical
from tests.pages.conftest import Server, _serve, fleet_signer
from tests.roadside.bundles import chained_store, seq_of, tamper

PERIOD = "since=2026-03-02&until=2026-03-03"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[bytes, Path]]:
    """A fresh bundle of FRT1A01's 2026-03-02 from a signing collector, and the CA's file."""
    folder = tmp_path_factory.mktemp("bundle")
    signer, ca = fleet_signer()
    ca_file = folder / "ca.crt"
    ca_file.write_bytes(identity.cert_pem(ca))
    server: Server
    (folder / "built").mkdir()
    for server in _serve(folder, chained_store(folder / "built"), signer):
        response = server.get(f"/vehicles/FRT1A01/bundle?{PERIOD}", server.token("fiscal"))
        assert response.status_code == 200, response.text[:300]
        yield response.content, ca_file


def _verify(tmp_path: Path, data: bytes, *extra: str) -> int:
    path = tmp_path / "bundle.zip"
    path.write_bytes(data)
    return main(["verify", str(path), *extra])


def test_a_fresh_bundle_is_intact(fresh: tuple[bytes, Path], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    data, ca_file = fresh
    assert _verify(tmp_path, data, "--ca", str(ca_file)) == 0
    out = capsys.readouterr().out
    assert "vehicle FRT1A01" in out
    assert "signed by collector central" in out
    assert "INTACT" in out
    assert "NOT INTACT" not in out
    assert "agent a1: seq 1 to" in out
    assert "agent operator: seq 1 to 2" in out
    # seq 101 (the day before's record) is outside the period: followed through its link
    assert "1 link(s) of records outside the period followed" in out
    assert _verify(tmp_path, data, "--ca", str(ca_file), "--lang", "pt-BR") == 0
    out = capsys.readouterr().out
    assert "ÍNTEGRO" in out
    # the period in local time (UTC−3): 2026-03-02T03:00Z to 2026-03-03T03:00Z
    assert ("de 02/03/2026 00:00:00 a 03/03/2026 00:00:00 (hora local America/Sao_Paulo)"
            in out)
    # a manifest's zone is read before anything is trusted: a path is no zone, shown as it is
    from frota.commands.verify_bundle import render
    from protocols.bundle_check import BundleReport

    hostile = BundleReport(manifest={"vehicle": "X", "from": "2026-03-02T03:00:00.000Z",
                                     "to": None, "timezone": "../../../etc/passwd"})
    assert "de 2026-03-02T03:00:00.000Z a None" in render("p.zip", hostile, "pt-BR")[0]
    assert "assinado por coletor central" in out
    # without --ca: checked against the bundle's own CA, and it says so
    assert _verify(tmp_path, data) == 0
    assert "NOT compared with yours" in capsys.readouterr().out


def _codes(data: bytes, ca_file: Path) -> list[tuple[str, int | None, int | None]]:
    report = check_bundle(data, identity.load_cert_file(ca_file))
    return [(p.code, p.line, p.seq) for p in report.problems]


def test_a_record_removed_is_found_with_its_seq(fresh: tuple[bytes, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    data, ca_file = fresh
    lines = tamper(data, lambda ls: ls)  # unchanged copy: still intact
    assert _codes(lines, ca_file) == []
    removed: list[int] = []

    def drop_200th(ls: list[bytes]) -> list[bytes]:
        removed.append(seq_of(ls[199]))
        return ls[:199] + ls[200:]

    bad = tamper(data, drop_200th)
    codes = _codes(bad, ca_file)
    # the record after it (now line 200) follows a gap of exactly the removed seq
    assert ("gap", 200, removed[0] + 1) in codes
    assert ("file_changed", None, None) in codes
    assert ("count", None, None) in codes
    assert _verify(tmp_path, bad, "--ca", str(ca_file)) == 3
    out = capsys.readouterr().out
    assert "NOT INTACT" in out
    assert f"records.jsonl, line 200, agent a1: seq {removed[0]} to {removed[0]} missing" in out
    # at the end of the chain: found against the manifest's chain end
    last = tamper(data, lambda ls: ls[:-1])
    assert [c for c in _codes(last, ca_file) if c[0] == "chain_end"]
    # an operator entry deleted (the first of the collector's operator chain)
    no_entry = tamper(data, lambda ls: [line for line in ls
                                        if not line.startswith(b'{"agent":"operator"')
                                        or b'"seq":2' in line])
    report = check_bundle(no_entry, identity.load_cert_file(ca_file))
    assert [(p.code, p.agent, p.seq) for p in report.problems if p.code == "chain_start"] == [
        ("chain_start", "operator", 2)]


def test_a_record_changed_is_found_at_the_next_link(fresh: tuple[bytes, Path],
                                                    tmp_path: Path) -> None:
    data, ca_file = fresh

    def slower(ls: list[bytes]) -> list[bytes]:
        i = next(i for i, line in enumerate(ls) if b'"kmh":' in line and i > 50)
        rec = orjson.loads(ls[i])
        rec["kmh"] = 40.0
        return [*ls[:i], canonical(rec), *ls[i + 1:]]

    bad = tamper(data, slower)
    codes = _codes(bad, ca_file)
    broken = [c for c in codes if c[0] == "broken_link"]
    assert len(broken) == 1
    _, line, seq = broken[0]
    assert line is not None
    assert seq is not None
    # the link broken is the one after the changed record: the line before it holds it
    assert seq_of(tamper_line(bad, line - 1)) == seq - 1
    assert orjson.loads(tamper_line(bad, line - 1))["kmh"] == 40.0
    assert _verify(tmp_path, bad, "--ca", str(ca_file), "--lang", "pt-BR") == 3


def tamper_line(data: bytes, number: int) -> bytes:
    """Line ``number`` (1-based; -1 the last) of a bundle's records.jsonl."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        lines = zf.read("records.jsonl").splitlines()
        return lines[number - 1] if number > 0 else lines[number]


def test_records_added_are_found(fresh: tuple[bytes, Path]) -> None:
    data, ca_file = fresh
    # a record copied: its seq twice
    dup = tamper(data, lambda ls: [*ls[:10], ls[5], *ls[10:]])
    assert ("duplicate", 11, seq_of(tamper_line(data, 6))) in _codes(dup, ca_file)

    # a forged record chained after the last one (its prev right): beyond the manifest's end
    def forge(ls: list[bytes]) -> list[bytes]:
        import hashlib

        rec = orjson.loads(ls[-1])
        rec.update(seq=rec["seq"] + 1, prev=hashlib.sha256(ls[-1]).hexdigest())
        return [*ls, canonical(rec)]

    last_seq = seq_of(tamper_line(data, -1))
    codes = _codes(tamper(data, forge), ca_file)
    assert next(c for c in codes if c[0] == "chain_end")[2] == last_seq + 1
    assert ("count", None, None) in codes


def test_a_bundle_resigned_by_another_ca_is_refused(fresh: tuple[bytes, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _, ca_file = fresh
    other, _ = fleet_signer()
    from protocols.bundle import pack

    forged = pack({"records.jsonl": b""}, {"vehicle": "FRT1A01", "records": 0, "chains": []},
                  other)
    assert _verify(tmp_path, forged, "--ca", str(ca_file)) == 3
    assert "does not chain to the fleet CA" in capsys.readouterr().out
    assert _verify(tmp_path, b"not a zip", "--ca", str(ca_file)) == 3
    assert _verify(tmp_path, b"PK\x03\x04" + b"\x00" * 40) == 3
    assert main(["verify", str(tmp_path / "none.zip")]) == 1


def _hand_bundle(outside: list[dict[str, object]]) -> tuple[bytes, x509.Certificate]:
    """Seqs 1 and 3 of agent a1 in the period 2026-03-02 (UTC); seq 2 only as ``outside``."""
    import hashlib

    from protocols.bundle import chains, pack
    from protocols.chain import GENESIS, record_hash
    from protocols.records import ms_to_ts, now_ms

    signer, ca = fleet_signer()
    recs: list[dict[str, object]] = []
    prev = GENESIS
    for seq, ts in ((1, "2026-03-02T10:00:00.000Z"), (2, "2026-03-01T10:00:00.000Z"),
                    (3, "2026-03-02T10:00:01.000Z")):
        rec = {"vehicle": "FRT1A01", "ts": ts, "kind": "device", "device": "gps", "status": "ok",
               "agent": "a1", "seq": seq, "prev": prev}
        prev = record_hash(rec)
        recs.append(rec)
    lines = [canonical(recs[0]), canonical(recs[2])]
    link = {"agent": "a1", "seq": 2, "hash": hashlib.sha256(canonical(recs[1])).hexdigest(),
            "prev": recs[1]["prev"], "state": "stored"}
    manifest = {"vehicle": "FRT1A01", "from": "2026-03-02T00:00:00.000Z",
                "to": "2026-03-03T00:00:00.000Z", "records": 2, "chains": chains(lines),
                "created": ms_to_ts(now_ms()),     # fleet_signer's certificates are from now
                "outside": [dict(link, **o) for o in outside]}
    return pack({"records.jsonl": b"".join(x + b"\n" for x in lines)}, manifest, signer), ca


def test_a_seq_outside_the_period_is_followed_and_one_inside_is_missing() -> None:
    data, ca = _hand_bundle([{"ts": "2026-03-01T10:00:00.000Z"}])
    report = check_bundle(data, ca)
    assert report.intact, report.problems
    assert report.outside == 1
    # the same link claiming a time inside the period: that record should be in the bundle
    data, ca = _hand_bundle([{"ts": "2026-03-02T10:00:00.500Z"}])
    assert [(p.code, p.seq) for p in check_bundle(data, ca).problems] == [("missing_in_period", 2)]
    # no link at all: seq 2 is a gap, found at the line of seq 3
    data, ca = _hand_bundle([])
    assert [(p.code, p.line, p.seq) for p in check_bundle(data, ca).problems] == [("gap", 2, 3)]
    # a link whose hash is not seq 2's: seq 3's prev does not match it
    data, ca = _hand_bundle([{"ts": "2026-03-01T10:00:00.000Z", "hash": "0" * 64}])
    assert [(p.code, p.line, p.seq) for p in check_bundle(data, ca).problems] == [
        ("broken_link", 2, 3)]


def test_a_decoy_member_of_the_same_name_is_refused(fresh: tuple[bytes, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import zipfile

    from protocols import bundle_check

    data, ca_file = fresh
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        # a decoy records.jsonl before the signed one: the checker read the last, an unzip tool
        # may show the first
        dst.writestr("records.jsonl", b"{}\n")
        for info in src.infolist():
            if info.filename == "records.jsonl":
                with pytest.warns(UserWarning, match="Duplicate name"):
                    dst.writestr(info.filename, src.read(info))
            else:
                dst.writestr(info.filename, src.read(info))
    assert ("duplicate_member", None, None) in _codes(out.getvalue(), ca_file)
    # every member is held in memory: their declared sizes are bounded together, not only
    # one by one (here the bound is the fresh bundle's total less one byte)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        total = sum(i.file_size for i in zf.infolist())
    monkeypatch.setattr(bundle_check, "MAX_TOTAL", total - 1)
    assert _codes(data, ca_file) == [("too_large", None, None)]
    monkeypatch.setattr(bundle_check, "MAX_TOTAL", total)
    assert _codes(data, ca_file) == []


def test_the_keyring_refuses_a_key_revoked_before_the_bundle(
        fresh: tuple[bytes, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import zipfile

    from protocols.keyring import entry_json, write_entries
    from protocols.records import ms_to_ts, ts_to_ms

    data, ca_file = fresh
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        cert = identity.load_cert(zf.read("certs/collector.pem"), "collector")
        made = ts_to_ms(orjson.loads(zf.read("manifest.json"))["created"])
    hour = 3_600_000
    cases = {"kept": ([entry_json(cert)], 0, "keyring: the signer's key is the fleet's"),
             # a key revoked an hour before the bundle was made (a stolen bus's, say)
             "before": ([entry_json(cert, made - hour)], 3,
                        f"revoked at {ms_to_ts(made - hour)}, not after the bundle was made"),
             # revoked an hour after: the bundle stands, the revocation is said
             "after": ([entry_json(cert, made + hour)], 0,
                       f"revoked at {ms_to_ts(made + hour)}, after the bundle says it was made"),
             "unknown": ([], 3, "is not in the keyring")}
    for name, (entries, code, says) in cases.items():
        keyring = tmp_path / f"{name}.json"
        write_entries(keyring, entries)
        assert _verify(tmp_path, data, "--ca", str(ca_file), "--keyring", str(keyring)) == code
        assert says in capsys.readouterr().out, name
    assert _verify(tmp_path, data, "--keyring", str(tmp_path / "kept.json")) == 1
    assert "--keyring needs --ca" in capsys.readouterr().err
    assert _verify(tmp_path, data, "--ca", str(ca_file), "--keyring",
                   str(tmp_path / "none.json")) == 1
    assert "no keyring at" in capsys.readouterr().err
