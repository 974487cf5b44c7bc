"""The signed bundle of a vehicle's records (GET /vehicles/{v}/bundle and the Disco do dia's
link): found, not found, forbidden, bad input; every file's hash in the manifest, the manifest's
signature by the collector's certified key, the certificate chained to the fleet CA, the records
in canonical form. sp-clean renders 13,408 records (wc -l of `frota sim scenario render
sp-clean`); all of them fall on 2026-03-02 local."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import time
import zipfile

import httpx
import pytest

from protocols import identity
from protocols.canonical import canonical
from tests.pages.conftest import Server
from tests.pages.fleet import AZUL, DAY, VERDE
from tests.services import unnamed_files

SP_CLEAN_RECORDS = 13_408


def _zip(response: httpx.Response) -> zipfile.ZipFile:
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"] == "application/zip"
    return zipfile.ZipFile(io.BytesIO(response.content))


def test_a_bundle_is_complete_and_signed(signed_server: Server) -> None:
    server = signed_server
    fiscal = server.token("fiscal")
    zf = _zip(server.get(f"/vehicles/FRT1A01/bundle?since={DAY}&until=2026-03-03", fiscal))
    names = set(zf.namelist())
    assert names == {"records.jsonl", "findings.jsonl", "disco-2026-03-02.svg", "manifest.json",
                     "manifest.sig", "certs/collector.pem", "certs/ca.pem"}
    manifest_bytes = zf.read("manifest.json")
    manifest = json.loads(manifest_bytes)
    assert (manifest["schema"], manifest["vehicle"], manifest["timezone"]) == (
        1, "FRT1A01", "America/Sao_Paulo")
    assert manifest["from"] == "2026-03-02T03:00:00.000Z"       # local midnight
    assert manifest["records"] == SP_CLEAN_RECORDS
    for entry in manifest["files"]:
        assert hashlib.sha256(zf.read(entry["name"])).hexdigest() == entry["sha256"]
    lines = zf.read("records.jsonl").splitlines()
    assert len(lines) == SP_CLEAN_RECORDS
    assert all(canonical(json.loads(line)) == line for line in lines[:500])
    # the signature: by the key the collector's certificate certifies, issued by the fleet CA
    ca = identity.load_cert(zf.read("certs/ca.pem"))
    cert = identity.load_cert(zf.read("certs/collector.pem"))
    assert identity.certified(cert, ca) == ("collector", "central")
    signature = base64.b64decode(zf.read("manifest.sig"))
    assert identity.verify(identity.public_key_of(cert), signature, manifest_bytes)
    assert not identity.verify(identity.public_key_of(cert), signature, manifest_bytes + b" ")
    # an operador of the vehicle may take it too
    azul = server.token("operador", AZUL)
    assert server.get(f"/vehicles/FRT1A01/bundle?since={DAY}&until=2026-03-03", azul).status_code == 200


def test_a_bundle_of_a_day_with_findings_holds_them(signed_server: Server) -> None:
    zf = _zip(signed_server.get("/vehicles/FRT2B02/bundle?since=2026-03-03&until=2026-03-04",
                                signed_server.token("fiscal")))
    rules = sorted(json.loads(line)["rule"] for line in zf.read("findings.jsonl").splitlines())
    assert rules == ["trip.assistance_due", "trip.interruption"]


def test_bundle_not_found_forbidden_and_bad_input(server: Server) -> None:
    fiscal = server.token("fiscal")
    period = f"since={DAY}&until=2026-03-03"
    assert server.get(f"/vehicles/FRT1A01/bundle?{period}").status_code == 401
    assert server.get(f"/vehicles/NOPE123/bundle?{period}", fiscal).status_code == 404
    assert server.get(f"/vehicles/FRT1A01/bundle?{period}",
                      server.token("operador", VERDE)).status_code == 404
    for bad in ("since=yesterday&until=2026-03-03", "since=2026-03-03&until=2026-03-02",
                "since=2026-01-01&until=2026-03-03", f"since={DAY}",
                # days no page can draw: 9999-12-31's end is no date, 0001 predates records
                "since=9999-12-31&until=9999-12-31T12:00:00Z",
                "since=0001-01-01&until=0001-01-02"):
        assert server.get(f"/vehicles/FRT1A01/bundle?{bad}", fiscal).status_code == 400, bad
    # unsigned on a collector without [trust], and it says so
    zf = _zip(server.get(f"/vehicles/FRT1A01/bundle?{period}", fiscal))
    assert json.loads(zf.read("manifest.json"))["signed"] is False
    assert "manifest.sig" not in zf.namelist()


def test_the_disc_page_links_the_bundle_of_its_day(server: Server) -> None:
    from tests.pages.test_pages_http import login

    with login(server, server.token("fiscal")) as client:
        page = client.get(f"/disco/FRT1A01?dia={DAY}").text
        link = re.search(r'href="(/disco/FRT1A01/pacote\?dia=[0-9-]+)"', page)
        assert link is not None
        zf = _zip(client.get(link.group(1)))
        assert json.loads(zf.read("manifest.json"))["records"] == SP_CLEAN_RECORDS
        assert client.get("/disco/FRT1A01/pacote?dia=2026-02-30").status_code == 400
        assert client.get("/disco/FRT1A01/pacote?dia=9999-12-31").status_code == 400


def test_a_bundle_larger_than_its_memory_is_sent_from_a_temporary_file(
        signed_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``export.IN_MEMORY`` a bundle is made in a temporary file and sent from it a chunk
    at a time (31 days of a bus: ≈ 270 MB the collector held twice): the same bundle, its
    length announced, and the file closed once sent."""
    from collector.web import export

    fiscal = signed_server.token("fiscal")
    url = f"/vehicles/FRT1A01/bundle?since={DAY}&until=2026-03-03"
    in_memory = signed_server.get(url, fiscal)
    before = unnamed_files()
    monkeypatch.setattr(export, "IN_MEMORY", 4096)
    monkeypatch.setattr(export, "CHUNK", 10_000)
    spilled = signed_server.get(url, fiscal)
    zf, kept = _zip(spilled), _zip(in_memory)
    assert int(spilled.headers["content-length"]) == len(spilled.content) > 100_000
    manifest, kept_manifest = json.loads(zf.read("manifest.json")), json.loads(
        kept.read("manifest.json"))
    assert manifest["records"] == SP_CLEAN_RECORDS
    assert manifest["files"] == kept_manifest["files"]  # the same files, byte for byte
    assert zf.read("records.jsonl") == kept.read("records.jsonl")
    # closed by the response's last read, which may finish just after the client has it all
    deadline = time.monotonic() + 10
    while unnamed_files() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert unnamed_files() == before
