"""Certificates are checked for *when* wherever a signature is accepted (docs/trust.md, "Validity
periods"): an inspector token at the bus's now — the issuing collector's certificate and the
fleet CA's valid then, and the collector's certificate covering the token's whole life; a bundle
at the manifest's ``created`` — the signer's certificate and the CA's valid then. The
certificates are made by hand (cryptography's x509 builder) with chosen validity periods; every
expected time below is one of those periods' ends."""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from frota.cli import main
from protocols import identity
from protocols.bundle import BundleSigner, chains, pack
from protocols.bundle_check import check_bundle
from protocols.canonical import canonical, jcs
from protocols.chain import GENESIS, record_hash
from protocols.inspector_token import TokenError, check, covers, issue
from protocols.keyring import entry_json, load_keyring, write_entries
from protocols.records import ms_to_ts, ts_to_ms

UTC = dt.UTC
BUS = "ABC1D23"
HOUR = 3_600_000
# the CA: all of 2026; the collector's and the bus's certificates: 2026-03-01 to 2026-03-03
CA_FROM, CA_TO = dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(2027, 1, 1, tzinfo=UTC)
KEY_FROM, KEY_TO = dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 3, 3, tzinfo=UTC)
FROM_MS, TO_MS = 1_772_323_200_000, 1_772_496_000_000     # KEY_FROM, KEY_TO in ms
T0 = 1_772_460_000_000                                    # 2026-03-02T14:00:00Z


def make_ca(not_before: dt.datetime = CA_FROM, not_after: dt.datetime = CA_TO,
            ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test fleet CA")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def make_key(ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate], role: str, name: str,
             not_before: dt.datetime = KEY_FROM, not_after: dt.datetime = KEY_TO,
             ) -> tuple[ed25519.Ed25519PrivateKey, x509.Certificate]:
    key = ed25519.Ed25519PrivateKey.generate()
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca[1].subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .sign(ca[0], hashes.SHA256()))
    return key, cert


def test_validity_is_both_ends_included() -> None:
    ca = make_ca()
    _, cert = make_key(ca, "collector", "main")
    assert ts_to_ms("2026-03-01T00:00:00.000Z") == FROM_MS   # the constants, checked once
    assert ts_to_ms("2026-03-03T00:00:00.000Z") == TO_MS
    assert identity.validity_ms(cert) == (FROM_MS, TO_MS)
    assert identity.certified(cert, ca[1]) == ("collector", "main")   # who, not when
    assert [identity.valid_at(cert, ms) for ms in (FROM_MS - 1, FROM_MS, T0, TO_MS, TO_MS + 1)] \
        == [False, True, True, True, False]


def raw_token(key: ed25519.Ed25519PrivateKey, cert: x509.Certificate, nbf: int, exp: int) -> str:
    """A token as ``issue`` makes one, without ``issue``'s refusal of one its certificate does
    not cover (a collector of another make, or an old Frota)."""
    from cryptography.hazmat.primitives import serialization

    claims = {"type": "frota.inspector", "schema": 1, "id": "0123456789abcdef",
              "inspector": "Ana", "vehicles": [BUS], "nbf": ms_to_ts(nbf), "exp": ms_to_ts(exp)}
    body = jcs(claims)

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return ".".join((b64(body), b64(key.sign(body)),
                     b64(cert.public_bytes(serialization.Encoding.DER))))


def refused(token: str, ca: x509.Certificate, now: int) -> tuple[str, str]:
    with pytest.raises(TokenError) as caught:
        check(token, ca, BUS, now)
    return str(caught.value), caught.value.portuguese


def test_a_token_needs_its_collectors_certificate_valid_at_the_buss_now() -> None:
    ca = make_ca()
    key, cert = make_key(ca, "collector", "main")
    token = issue(key, cert, "Ana", [BUS], T0, 4)
    assert check(token, ca[1], BUS, T0 + HOUR).collector == "main"        # valid
    # the same certificate, a token within it, but the bus's now after the certificate's end
    late = issue(key, cert, "Ana", [BUS], TO_MS - 2 * HOUR, 1)
    assert refused(late, ca[1], TO_MS + 1) == (
        "the certificate of collector main expired at 2026-03-03T00:00:00.000Z",
        "o certificado do coletor main expirou em 03/03/2026 00:00:00 UTC")
    # ... and before its start (a token made for then, shown on a bus whose now is earlier)
    early = issue(key, cert, "Ana", [BUS], FROM_MS, 1)
    assert refused(early, ca[1], FROM_MS - 1) == (
        "the certificate of collector main is not valid yet (valid from "
        "2026-03-01T00:00:00.000Z)",
        "o certificado do coletor main ainda não vale (vale a partir de 01/03/2026 00:00:00 UTC)")
    # the fleet CA's certificate expired at the bus's now (here: at 2026-03-02T12:00)
    short_ca = make_ca(not_after=dt.datetime(2026, 3, 2, 12, tzinfo=UTC))
    key2, cert2 = make_key(short_ca, "collector", "main")
    assert refused(issue(key2, cert2, "Ana", [BUS], T0, 4), short_ca[1], T0 + HOUR) == (
        "the fleet CA's certificate expired at 2026-03-02T12:00:00.000Z",
        "o certificado da AC da frota expirou em 02/03/2026 12:00:00 UTC")


def test_a_token_outliving_its_issuers_certificate_is_refused_not_capped() -> None:
    ca = make_ca()
    key, cert = make_key(ca, "collector", "main")
    # the token's last valid millisecond is exp - 1: exp up to TO_MS + 1 is covered
    assert covers(cert, FROM_MS, TO_MS + 1)
    assert not covers(cert, FROM_MS, TO_MS + 2)
    assert not covers(cert, FROM_MS - 1, FROM_MS + HOUR)
    # 22:00 for 4 h: to 02:00 on the 3rd, two hours past the certificate's end
    nbf = TO_MS - 2 * HOUR
    with pytest.raises(ValueError, match="would not lie within the collector's certificate "
                       r"\(valid 2026-03-01T00:00:00.000Z to 2026-03-03T00:00:00.000Z\)"):
        issue(key, cert, "Ana", [BUS], nbf, 4)
    # made another way, it is refused at the bus even while the certificate is still valid
    english, portuguese = refused(raw_token(key, cert, nbf, nbf + 4 * HOUR), ca[1], nbf + HOUR)
    assert english == ("the token (2026-03-02T22:00:00.000Z to 2026-03-03T02:00:00.000Z) does "
                       "not lie within the certificate of collector main that issued it (valid "
                       "2026-03-01T00:00:00.000Z to 2026-03-03T00:00:00.000Z)")
    assert portuguese == ("o token (02/03/2026 22:00:00 UTC a 03/03/2026 02:00:00 UTC) não cabe "
                          "na validade do certificado do coletor main que o emitiu (01/03/2026 "
                          "00:00:00 UTC a 03/03/2026 00:00:00 UTC)")
    # one that ends exactly at the certificate's end is accepted
    assert check(raw_token(key, cert, nbf, TO_MS), ca[1], BUS, nbf + HOUR).expires_ms == TO_MS


def bundle(signer_cert: tuple[ed25519.Ed25519PrivateKey, x509.Certificate],
           ca: x509.Certificate, created: str | None) -> bytes:
    """A bus's bundle of two chained records of 2026-03-02, saying it was made at ``created``."""
    key, cert = signer_cert
    recs: list[bytes] = []
    prev = GENESIS
    for seq in (1, 2):
        rec = {"vehicle": BUS, "ts": ms_to_ts(T0 + seq * 1000), "kind": "device",
               "device": "gps", "status": "ok", "agent": "a1", "seq": seq, "prev": prev}
        prev = record_hash(rec)
        recs.append(canonical(rec))
    manifest: dict[str, object] = {
        "vehicle": BUS, "from": "2026-03-02T00:00:00.000Z", "to": "2026-03-03T00:00:00.000Z",
        "timezone": "UTC", "records": 2, "chains": chains(recs)}
    if created is not None:
        manifest["created"] = created
    signer = BundleSigner(BUS, identity.key_id(key.public_key()),
                          identity.cert_pem(cert).decode(), identity.cert_pem(ca).decode(),
                          key.sign, role="vehicle")
    return pack({"records.jsonl": b"".join(r + b"\n" for r in recs)}, manifest, signer)


def problems(data: bytes, ca: x509.Certificate | None) -> list[tuple[str, str | None, dict[str, object]]]:
    return [(p.code, p.file, p.detail) for p in check_bundle(data, ca).problems]


def test_a_bundle_is_checked_at_the_time_it_says_it_was_made() -> None:
    ca = make_ca()
    bus = make_key(ca, "vehicle", BUS)
    period = {"not_before": "2026-03-01T00:00:00.000Z", "not_after": "2026-03-03T00:00:00.000Z"}
    # made inside the signer's certificate (its last second included): intact
    for created in ("2026-03-02T15:00:00.000Z", "2026-03-03T00:00:00.000Z"):
        report = check_bundle(bundle(bus, ca[1], created), ca[1])
        assert report.intact, report.problems
        assert report.validity == {
            "signer": ("2026-03-01T00:00:00.000Z", "2026-03-03T00:00:00.000Z"),
            "ca": ("2026-01-01T00:00:00.000Z", "2027-01-01T00:00:00.000Z")}
    # a creation time after the certificate expired, and one before it was valid
    late = "2026-03-03T00:00:00.001Z"
    assert problems(bundle(bus, ca[1], late), ca[1]) == [
        ("signer_expired", "certs/vehicle.pem", {"created": late, **period})]
    early = "2026-02-28T23:59:59.999Z"
    assert problems(bundle(bus, ca[1], early), ca[1]) == [
        ("signer_not_yet_valid", "certs/vehicle.pem", {"created": early, **period})]
    # no creation time: the certificates' validity cannot be checked
    assert problems(bundle(bus, ca[1], None), ca[1]) == [
        ("no_created", "manifest.json", {"created": None})]


def test_the_fleet_ca_must_be_valid_when_the_bundle_was_made() -> None:
    # a CA of 2026-03-02 12:00 onwards, a key certified (the CA signs it anyway) from the 1st
    ca = make_ca(not_before=dt.datetime(2026, 3, 2, 12, tzinfo=UTC))
    bus = make_key(ca, "vehicle", BUS)
    created = "2026-03-02T11:00:00.000Z"
    data = bundle(bus, ca[1], created)
    # checked against the bundle's own CA (certs/ca.pem) and against the inspector's (--ca)
    expected = {"created": created, "not_before": "2026-03-02T12:00:00.000Z",
                "not_after": "2027-01-01T00:00:00.000Z"}
    assert problems(data, ca[1]) == [("ca_not_yet_valid", None, expected)]
    assert problems(data, None) == [("ca_not_yet_valid", "certs/ca.pem", expected)]


def test_frota_verify_says_it_in_english_and_portuguese(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ca = make_ca()
    bus = make_key(ca, "vehicle", BUS)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(identity.cert_pem(ca[1]))
    path = tmp_path / "pacote.zip"
    path.write_bytes(bundle(bus, ca[1], "2026-03-02T15:00:00.000Z"))
    assert main(["verify", str(path), "--ca", str(ca_file)]) == 0
    assert ("certificates valid when the bundle says it was made: the signer's "
            "2026-03-01T00:00:00.000Z to 2026-03-03T00:00:00.000Z, the fleet CA's "
            "2026-01-01T00:00:00.000Z to 2027-01-01T00:00:00.000Z") in capsys.readouterr().out
    path.write_bytes(bundle(bus, ca[1], "2026-03-04T10:00:00.000Z"))
    assert main(["verify", str(path), "--ca", str(ca_file)]) == 3
    out = capsys.readouterr().out
    assert ("certs/vehicle.pem: the bundle says it was made at 2026-03-04T10:00:00.000Z, AFTER "
            "the signer's certificate expired (2026-03-01T00:00:00.000Z to "
            "2026-03-03T00:00:00.000Z)") in out
    assert "certificates valid when" not in out
    assert main(["verify", str(path), "--ca", str(ca_file), "--lang", "pt-BR"]) == 3
    assert ("certs/vehicle.pem: o pacote diz ter sido feito em 2026-03-04T10:00:00.000Z, DEPOIS "
            "de expirado o certificado de quem assinou (2026-03-01T00:00:00.000Z a "
            "2026-03-03T00:00:00.000Z)") in capsys.readouterr().out


def test_the_keyring_period_is_the_certificate_within_the_cas(tmp_path: Path) -> None:
    """Checkpoints are checked against the keyring's periods (collector/verifier.py,
    collector/chaincheck.py): a key is certified while its certificate and the CA's are both
    valid, both ends included, and not from its revocation on."""
    ca = make_ca(not_after=dt.datetime(2026, 3, 2, 12, tzinfo=UTC))   # ends before the key's
    _, cert = make_key(ca, "vehicle", BUS)
    path = tmp_path / "keyring.json"
    write_entries(path, [entry_json(cert, revoked_ms=T0 - HOUR)])
    (entry,) = load_keyring(path, ca[1]).entries
    ca_end = ts_to_ms("2026-03-02T12:00:00.000Z")
    assert (entry.not_before_ms, entry.not_after_ms) == (FROM_MS, ca_end)
    assert [entry.valid_at(ms) for ms in (FROM_MS - 1, FROM_MS, ca_end, T0 - HOUR)] == [
        False, True, True, False]            # revoked at 13:00, after the CA's end: the CA's
    write_entries(path, [entry_json(cert, revoked_ms=ca_end - HOUR)])
    (entry,) = load_keyring(path, ca[1]).entries
    assert [entry.valid_at(ms) for ms in (ca_end - HOUR - 1, ca_end - HOUR)] == [True, False]
