"""NMEA decoder against real receivers: gpsd's regression captures and pynmeagps' bad input.

How to compare is set by ../shared/corpora/README.md: each valid RMC/GGA fix equals the TPV gpsd
wrote right after the same sentence (lat/lon 1e-6°, speed 0.01 m/s, course 0.01°, time of day
exact, date modulo 7168 days); every valid RMC with a TPV after it must give a record.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from protocols.nmea import NmeaDecoder, SentenceRejected, parse_sentence
from protocols.records import Record, ts_to_ms, validate

pytestmark = pytest.mark.corpus

DAY_MS = 86_400_000
ROLLOVER_MS = 7168 * DAY_MS  # 1024 GPS weeks: gpsd's week-rollover correction


def gpsd_logs(corpora: Path) -> list[Path]:
    logs = sorted((corpora / "nmea" / "gpsd").glob("*.log"))
    assert len(logs) >= 60
    return logs


def decode_file(path: Path) -> tuple[list[Record], NmeaDecoder]:
    decoder = NmeaDecoder(path.stem)
    data = path.read_bytes()
    records = decoder.feed(data[: len(data) // 2])
    records += decoder.feed(data[len(data) // 2 :])
    records += decoder.finish()
    for rec in records:
        validate(rec)
    return records, decoder


def fix_tpv_pairs(chk: Path) -> list[tuple[bytes, dict[str, Any]]]:
    """(RMC or GGA sentence, the TPV gpsd reported right after it) from a .chk file."""
    lines = [line.rstrip(b"\r") for line in chk.read_bytes().split(b"\n")]
    pairs = []
    for line, after in itertools.pairwise(lines):
        if line[:1] == b"$" and line[3:6] in (b"RMC", b"GGA") and after.startswith(b"{"):
            report = json.loads(after)
            if report.get("class") == "TPV":
                pairs.append((line, report))
    return pairs


def test_no_capture_makes_the_decoder_raise(corpora: Path) -> None:
    paths = gpsd_logs(corpora) + sorted((corpora / "nmea" / "pynmeagps").glob("*.log"))
    total = 0
    for path in paths:
        records, decoder = decode_file(path)
        total += len(records)
        assert decoder.stats.bytes_in == path.stat().st_size
    assert total > 1000


def test_every_fix_gpsd_decoded_matches(corpora: Path) -> None:
    compared = rmc_matched = 0
    not_ours: list[str] = []
    for log in gpsd_logs(corpora):
        records, _ = decode_file(log)
        by_sentence: dict[bytes, Record] = {}
        for rec in records:
            for sentence in bytes.fromhex(rec["raw"]).split(b"\r\n"):
                by_sentence.setdefault(sentence, rec)
        for sentence, tpv in fix_tpv_pairs(log.with_name(log.name + ".chk")):
            gpsd_has_fix = "lat" in tpv and tpv.get("mode", 0) >= 2
            try:
                fix = parse_sentence(sentence)
            except SentenceRejected as rejected:
                # gpsd accepts what Frota refuses by design (firmware-notes/nmea.md): no
                # checksum, a marine talker, a malformed field.
                reason = rejected.reason
                if gpsd_has_fix:
                    not_ours.append(f"{log.name}: {rejected}")
                assert reason in ("crc_failures", "skipped", "malformed"), sentence
                continue
            if not (fix.valid and gpsd_has_fix):
                # void by the sentence's own fields (GGA quality 0/empty/7/8, RMC status V)
                # while gpsd kept an earlier mode, or the reverse (gpsd's own cross-sentence state)
                continue
            where = f"{log.name}: {sentence.decode()}"
            assert fix.lat == pytest.approx(tpv["lat"], abs=1e-6), where
            assert fix.lon == pytest.approx(tpv["lon"], abs=1e-6), where
            if "time" in tpv:
                assert ts_to_ms(tpv["time"]) % DAY_MS == fix.tod_ms, where
            compared += 1
            if fix.sentence != "RMC":
                continue
            assert (fix.kmh is None) == ("speed" not in tpv), where
            assert (fix.course is None) == ("track" not in tpv), where
            assert sentence in by_sentence, f"no record for a valid RMC: {where}"
            rec = by_sentence[sentence]
            assert rec["lat"] == pytest.approx(tpv["lat"], abs=1e-6), where
            assert rec["lon"] == pytest.approx(tpv["lon"], abs=1e-6), where
            if "speed" in tpv:
                assert rec["kmh"] / 3.6 == pytest.approx(tpv["speed"], abs=0.01), where
            if "track" in tpv:
                assert rec["course"] == pytest.approx(tpv["track"], abs=0.01), where
            if "time" in tpv:
                assert (ts_to_ms(tpv["time"]) - ts_to_ms(rec["ts"])) % ROLLOVER_MS == 0, where
            rmc_matched += 1
    assert compared > 800
    assert rmc_matched > 300
    # Known and documented: HP 58534A sends no checksum, a Humminbird sounder talks as IN,
    # one RMC with date "2208-1".
    assert len(not_ours) < 40, not_ours


def test_marine_and_ais_captures_are_skipped(corpora: Path) -> None:
    gpsd = corpora / "nmea" / "gpsd"
    for name in ("sounder.log", "tnt-revolution.log", "humminbird-M37.log"):
        records, decoder = decode_file(gpsd / name)
        assert records == [], name
        assert decoder.stats.skipped > 0, name
    _, ais = decode_file(gpsd / "ait250.log")  # an AIS transponder: !AIVDM/!AIVDO skipped
    assert ais.stats.skipped >= 40


# pynmeagps' bad input, counted by hand from the files.
PYNMEAGPS = [
    # (file, positions, counters)
    ("pygpsdata-nmeabadck.log", 1, {"crc_failures": 2, "malformed": 0}),
    ("pygpsdata-nmeabadck2.log", 1, {"crc_failures": 1}),  # VTG with checksum '3)'
    ("pygpsdata-BADHDR.log", 2, {"crc_failures": 1}),  # '$&bTXT': a mangled address
    ("pygpsdata-nmeafoo2.log", 0, {"malformed": 1, "undated": 1}),  # speed 'X.138'
    ("pygpsdata-nmeafoo1.log", 1, {"unused": 5}),  # 4 GSA + GNFOO
    ("pygpsdata-nmeastartup.log", 0, {"void_fixes": 2}),  # RMC V, GGA quality 0
    ("pygpsdata-maritime.log", 0, {"skipped": 15}),  # 15 marine/AIS sentences
    ("pygpsdata-badeof.log", 1, {"bytes_dropped": 1}),  # a lone '$' at the end
    ("pygpsdata-nmea4lc.log", 1, {"crc_failures": 0}),  # lower-case checksums
    ("pygpsdata-userdefined.log", 0, {"skipped": 2}),  # $U1XYZ, $U2ZYX: not GNSS talkers
    ("quectel_nmea_get.log", 0, {"skipped": 103}),  # all proprietary $PQTM...
]


@pytest.mark.parametrize(("name", "positions", "counters"), PYNMEAGPS, ids=[p[0] for p in PYNMEAGPS])
def test_pynmeagps_bad_input(corpora: Path, name: str, positions: int, counters: dict[str, int]) -> None:
    records, decoder = decode_file(corpora / "nmea" / "pynmeagps" / name)
    assert len(records) == positions
    summary = decoder.stats.summary()
    for key, value in counters.items():
        assert summary[key] == value, key


def test_pynmeagps_every_sentence_is_accounted_for(corpora: Path) -> None:
    for path in sorted((corpora / "nmea" / "pynmeagps").glob("*.log")):
        if path.name == "pygpsdata-mixed.log":
            continue  # binary UBX between the sentences: '$' bytes that start nothing
        lines = path.read_bytes().replace(b"\r", b"\n").split(b"\n")
        sentences = sum(1 for line in lines if line.strip()[:1] in (b"$", b"!") and len(line.strip()) > 1)
        _, decoder = decode_file(path)
        # each is a frame (a fix, void, unused, skipped or malformed) or a checksum failure
        assert decoder.stats.frames + decoder.stats.crc_failures == sentences, path.name


def test_pynmeagps_badck_good_sentence_by_hand(corpora: Path) -> None:
    records, _ = decode_file(corpora / "nmea" / "pynmeagps" / "pygpsdata-nmeabadck.log")
    rec = records[0]
    assert rec["ts"] == "2021-03-06T10:36:07.000Z"
    assert rec["lat"] == pytest.approx(53 + 27.03942 / 60, abs=1e-7)
    assert rec["lon"] == pytest.approx(-(102 + 14.42462 / 60), abs=1e-7)
    assert rec["kmh"] == pytest.approx(0.046 * 1.852, abs=0.005)
